//! A reply that does not come within `io_timeout` reads as `Error::Timeout`, in the sync
//! client as in the async one: a loopback relay in front of a real redis-server passes the
//! commands on and, once told to, holds every reply (the connection stays open, nothing
//! comes back). Before, the sync client said "Resource temporarily unavailable (os error
//! 11)" (its socket timeout's `WouldBlock`) where the async one said "timed out".
#![cfg(feature = "server-tests")]

mod redis_support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloomsled::FilterConfig;
use bloomsled_redis::{Endpoint, Error, SharedFilter};
use redis_support::Server;

/// A relay to `to` that drops the server's replies while `hold` is set; returns its port.
fn holding_relay(to: String, hold: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(&to) else {
                continue;
            };
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut s_out);
            });
            let hold = hold.clone();
            std::thread::spawn(move || {
                let (mut s_in, mut c_out) = (server, client);
                let mut buf = [0u8; 65536];
                loop {
                    let n = match s_in.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if !hold.load(Ordering::SeqCst) && c_out.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

fn endpoint(port: u16) -> Endpoint {
    Endpoint::url(format!("redis://127.0.0.1:{port}/"))
        .io_timeout(Duration::from_millis(300))
        .retry_for(Duration::ZERO)
}

#[test]
fn a_held_reply_is_a_timeout_in_the_sync_client() {
    require_redis!();
    let server = Server::start();
    let hold = Arc::new(AtomicBool::new(false));
    let ep = endpoint(holding_relay(server.addr(), hold.clone()));
    let f = SharedFilter::create(&ep, "held", &FilterConfig::new(1_000)).unwrap();
    assert!(!f.contains(b"k").unwrap());
    hold.store(true, Ordering::SeqCst);
    let t = Instant::now();
    let e = f.contains(b"k").unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e:?}");
    assert!(e.to_string().contains("timed out"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn a_held_reply_is_a_timeout_in_the_async_client() {
    require_redis!();
    let server = Server::start();
    let hold = Arc::new(AtomicBool::new(false));
    let ep = endpoint(holding_relay(server.addr(), hold.clone()));
    SharedFilter::create(&ep, "held", &FilterConfig::new(1_000)).unwrap();
    let f = bloomsled_redis::AsyncSharedFilter::open(&ep, "held")
        .await
        .unwrap();
    assert!(!f.contains(b"k").await.unwrap());
    hold.store(true, Ordering::SeqCst);
    let e = f.contains(b"k").await.unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e:?}");
    assert!(e.to_string().contains("timed out"), "{e}");
}
