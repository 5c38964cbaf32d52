//! A creator that stalls past its lease: the name is freed for the next `create` (as the
//! lease promises), and the stalled creator, when it resumes, must not write into the filter
//! the next creator made and others use. Keys added to that filter stay found.
#![cfg(feature = "server-tests")]

mod redis_support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloomsled::FilterConfig;
use bloomsled_redis::{Endpoint, SharedFilter};
use redis_support::Server;

/// A loopback relay that forwards a client's bytes to the server until `limit` bytes went
/// through, then holds the rest (the client's writes stall, as on a congested link or a
/// paused process) until `release` is set.
struct StallingRelay {
    port: u16,
    forwarded: Arc<AtomicU64>,
    release: Arc<AtomicBool>,
}

impl StallingRelay {
    fn start(to: String, limit: u64) -> StallingRelay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let forwarded = Arc::new(AtomicU64::new(0));
        let release = Arc::new(AtomicBool::new(false));
        let (fw, rel) = (forwarded.clone(), release.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = TcpStream::connect(&to).unwrap();
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (fw, rel) = (fw.clone(), rel.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    loop {
                        let room = limit.saturating_sub(fw.load(Ordering::SeqCst));
                        if room == 0 && !rel.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                        let want = if rel.load(Ordering::SeqCst) {
                            buf.len()
                        } else {
                            buf.len().min(room as usize)
                        };
                        let n = match c_in.read(&mut buf[..want]) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        fw.fetch_add(n as u64, Ordering::SeqCst);
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let (mut s_in, mut c_out) = (server, client);
                    let _ = std::io::copy(&mut s_in, &mut c_out);
                    let _ = c_out.shutdown(Shutdown::Both);
                });
            }
        });
        StallingRelay {
            port,
            forwarded,
            release,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

/// Creates `name` through `slow` (the stalled creator's endpoint), to the creator's end.
type Creator = fn(Endpoint, &'static str, FilterConfig) -> bloomsled_redis::Result<()>;

#[test]
fn a_creator_stalled_past_its_lease_never_writes_into_the_next_creators_filter() {
    require_redis!();
    stalled_creator("stalled", |ep, name, config| {
        SharedFilter::create(&ep, name, &config).map(drop)
    });
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_creator_stalled_past_its_lease_never_writes_into_the_next_creators_filter() {
    require_redis!();
    stalled_creator("stalled-async", |ep, name, config| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(bloomsled_redis::AsyncSharedFilter::create(
                &ep, name, &config,
            ))
            .map(drop)
    });
}

fn stalled_creator(name: &'static str, create: Creator) {
    let s = Server::start();
    // Big enough for several 16 MiB creation pipelines (about 40 MB of blocks).
    let config = FilterConfig::new(20_000_000);
    // The stalled creator: its link stops after its first pipeline and the lease renewal
    // that follows it, and part of the second.
    let relay = StallingRelay::start(s.addr(), 24 << 20);
    let slow = Endpoint::url(relay.url()).io_timeout(Duration::from_secs(300));
    let slow_config = config.clone();
    let stalled = std::thread::spawn(move || create(slow, name, slow_config));
    let start = Instant::now();
    while relay.forwarded.load(Ordering::SeqCst) < 24 << 20 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the creator never got going"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Its lease runs out: the name is free again, and another process creates the filter.
    let mut c = s.client();
    let key = format!("bloomsled:{{{name}}}:config");
    let start = Instant::now();
    while redis::cmd("EXISTS").arg(&key).query::<i64>(&mut c).unwrap() == 1 {
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "the lease never ran out"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let f = SharedFilter::create(&Endpoint::url(s.url()), name, &config).unwrap();
    let keys: Vec<Vec<u8>> = (0..20_000)
        .map(|i| format!("key-{i}").into_bytes())
        .collect();
    f.insert_many(&keys).unwrap();
    assert!(f.contains_many(&keys).unwrap().iter().all(|&b| b));
    // The stalled creator resumes; its create cannot succeed (the name is taken)...
    relay.release.store(true, Ordering::SeqCst);
    let r = stalled.join().unwrap();
    assert!(r.is_err(), "the stalled creator's create succeeded");
    // ...and the filter the others use still holds every key it acknowledged.
    let found = f.contains_many(&keys);
    assert!(
        matches!(&found, Ok(v) if v.iter().all(|&b| b)),
        "keys added to the live filter are gone after the stalled creator resumed: {:?}",
        found.map(|v| v.iter().filter(|&&b| !b).count())
    );
}
