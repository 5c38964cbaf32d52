//! A loopback TCP relay in front of a real Redis server that can lose one reply: the
//! command ran in Redis, its reply never reaches the client, and the connection is cut.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::Server;

/// A loopback TCP relay in front of a Redis server that, when armed, cuts the connection
/// instead of passing on the next array reply (a `BITFIELD`'s): the command ran in Redis,
/// its reply is lost. Real bytes between a real client and a real server; only the loss
/// is placed.
pub struct Relay {
    port: u16,
    armed: Arc<AtomicBool>,
}

/// Which reply an armed relay cuts.
#[derive(Clone, Copy)]
pub enum Cut {
    /// The next array reply.
    Array,
    /// The next array reply whose first element is not an array (a `BITFIELD`'s, or a
    /// `HMGET`'s pipelined with it), not the arrays of arrays a cluster client reads its
    /// slot map from (`CLUSTER SLOTS`).
    FlatArray,
}

impl Cut {
    fn matches(self, reply: &[u8]) -> bool {
        if reply.first() != Some(&b'*') {
            return false;
        }
        match self {
            Cut::Array => true,
            Cut::FlatArray => reply
                .windows(2)
                .position(|w| w == b"\r\n")
                .is_some_and(|i| reply.get(i + 2).is_some_and(|&b| b != b'*')),
        }
    }
}

impl Relay {
    pub fn start(server: &Server) -> Relay {
        Self::start_to(server.addr(), Arc::new(AtomicBool::new(false)), Cut::Array)
    }

    /// A relay to `to` (host:port) that cuts `what` when `armed` is set (several relays may
    /// share one flag: the first matching reply through any of them is lost).
    pub fn start_to(to: String, armed: Arc<AtomicBool>, what: Cut) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = armed.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&to) else {
                    continue;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_in, &mut s_out);
                    let _ = s_out.shutdown(Shutdown::Write);
                });
                let cut = cut.clone();
                std::thread::spawn(move || {
                    let (mut s_in, mut c_out) = (server, client);
                    let mut buf = [0u8; 65536];
                    loop {
                        let n = match s_in.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if what.matches(&buf[..n]) && cut.swap(false, Ordering::SeqCst) {
                            let _ = c_out.shutdown(Shutdown::Both);
                            let _ = s_in.shutdown(Shutdown::Both);
                            return;
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(Shutdown::Both);
                });
            }
        });
        Relay { port, armed }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next array reply is lost, and its connection cut.
    pub fn lose_next_reply(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }
}
