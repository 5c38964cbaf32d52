//! Shared filter on a local redis-server: bloomsled's one-command-per-key layout beside the
//! classic Redis Bloom patterns, in one run, on one server, at the same pipelining.
//!
//! `cargo bench -p bloomsled-redis --bench redis` (needs `redis-server` on PATH; starts its
//! own on a free port without persistence and kills it at the end).
//!
//! Contenders, batched (1,000 keys per pipeline) and single-key (one round trip each):
//! - bloomsled: `GETRANGE` of the key's block + incarnation tag per key / one `BITFIELD` per shard
//!   a batch touches (one tag `GET`, then k `SET u1` per key);
//! - bloomsled counting: the same with `OVERFLOW SAT INCRBY u4` per cell, and removes (one
//!   script per shard a batch touches);
//! - classic (the PHP class's pattern): `MULTI` + k `SETBIT`/`GETBIT` + `EXEC` per key;
//! - classic without MULTI: k bare `GETBIT` per key (the cheapest classic lookup);
//! - classic, raw RESP: the classic batches written as raw protocol bytes, as bloomsled
//!   writes its own (so no ratio comes from the redis crate's command builder);
//! - Redisson-style: one `EVALSHA` per key whose script runs k `SETBIT`/`GETBIT`.
//!
//! Each figure is the median keys/s over interleaved rounds; ratios are of medians.

#[path = "../tests/redis_support/mod.rs"]
mod redis_support;

use std::time::Instant;

use bloomsled::hash::hash_key;
use bloomsled::FilterConfig;
use bloomsled_redis::{Endpoint, SharedFilter};
use redis::Value;

const KEYS: usize = 100_000;
const BATCH: usize = 1_000;
const ROUNDS: usize = 5;
const SINGLE: usize = 5_000;

const REDISSON_ADD: &str = "for i = 1, #ARGV do redis.call('SETBIT', KEYS[1], ARGV[i], 1) end \
                            return 1";
const REDISSON_HAS: &str = "for i = 1, #ARGV do \
                            if redis.call('GETBIT', KEYS[1], ARGV[i]) == 0 then return 0 end \
                            end return 1";

fn main() {
    if !redis_support::redis_available() {
        return;
    }
    let server = redis_support::Server::start();
    let ep = Endpoint::url(server.url());
    let f = SharedFilter::create(&ep, "bench", &FilterConfig::new(KEYS as u64 * 2)).unwrap();
    let fc =
        SharedFilter::create_counting(&ep, "bench-counting", &FilterConfig::new(KEYS as u64 * 2))
            .unwrap();
    let k = f.shape().num_hashes;
    let m = f.shape().num_blocks * 512;
    let mut con = server.client();
    let add_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(REDISSON_ADD)
        .query(&mut con)
        .unwrap();
    let has_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(REDISSON_HAS)
        .query(&mut con)
        .unwrap();
    let keys: Vec<Vec<u8>> = (0..KEYS)
        .map(|i| format!("https://www.example.com/articles/{i}/index.html").into_bytes())
        .collect();
    // The classic k offsets of a key: k seeded hashes mod m, as k hash functions would give.
    let offsets =
        |key: &[u8]| -> Vec<u64> { (0..u64::from(k)).map(|i| hash_key(key, i) % m).collect() };
    // One pipeline of a Redisson-style script call per key of `chunk`.
    let evalsha = |sha: &str, chunk: &[Vec<u8>]| {
        let mut p = redis::pipe();
        for key in chunk {
            p.cmd("EVALSHA")
                .arg(sha)
                .arg(1)
                .arg("redisson")
                .arg(offsets(key));
        }
        p
    };
    println!(
        "shared filter: {KEYS} keys, k = {k}, {m} bits; batches of {BATCH}, {ROUNDS} rounds, \
         redis-server {}",
        server.version()
    );

    let mut results: Vec<(&str, Vec<f64>)> = Vec::new();
    // Runs `work` (n keys' worth) and records its rate under `name`.
    let mut timed = |name: &'static str, n: usize, work: &mut dyn FnMut()| {
        let t = Instant::now();
        work();
        let rate = n as f64 / t.elapsed().as_secs_f64();
        match results.iter_mut().find(|(x, _)| *x == name) {
            Some((_, v)) => v.push(rate),
            None => results.push((name, vec![rate])),
        }
    };
    for round in 0..ROUNDS {
        // Fresh bitmaps each round, so adds set new bits in every round.
        redis::cmd("DEL")
            .arg("classic")
            .arg("redisson")
            .exec(&mut con)
            .unwrap();
        timed("bloomsled add (batched)", KEYS, &mut || {
            for chunk in keys.chunks(BATCH) {
                f.insert_many(chunk).unwrap();
            }
        });

        // Counting: add every key, then remove every key (back to zero for the next round).
        timed("bloomsled counting add (batched)", KEYS, &mut || {
            for chunk in keys.chunks(BATCH) {
                fc.insert_many(chunk).unwrap();
            }
        });
        timed("bloomsled counting remove (batched)", KEYS, &mut || {
            for chunk in keys.chunks(BATCH) {
                assert!(fc.remove_many(chunk).unwrap().iter().all(|&r| r));
            }
        });

        timed("classic MULTI+SETBIT add (batched)", KEYS, &mut || {
            for chunk in keys.chunks(BATCH) {
                let mut p = redis::pipe();
                for key in chunk {
                    p.cmd("MULTI");
                    for o in offsets(key) {
                        p.cmd("SETBIT").arg("classic").arg(o).arg(1);
                    }
                    p.cmd("EXEC");
                }
                let _: Vec<Value> = p.query(&mut con).unwrap();
            }
        });

        // The same commands written as raw RESP (as bloomsled writes its own), so the ratio
        // is not about the redis crate's command builder.
        timed(
            "classic MULTI+SETBIT add, raw RESP (batched)",
            KEYS,
            &mut || {
                for chunk in keys.chunks(BATCH) {
                    let mut w = Resp::default();
                    for key in chunk {
                        w.cmd(&[b"MULTI"]);
                        for o in offsets(key) {
                            w.cmd(&[b"SETBIT", b"classic", o.to_string().as_bytes(), b"1"]);
                        }
                        w.cmd(&[b"EXEC"]);
                    }
                    w.send(&mut con);
                }
            },
        );

        timed("redisson-style EVALSHA add (batched)", KEYS, &mut || {
            for chunk in keys.chunks(BATCH) {
                let _: Vec<Value> = evalsha(&add_sha, chunk).query(&mut con).unwrap();
            }
        });

        let mut found = 0;
        timed("bloomsled lookup (batched)", KEYS, &mut || {
            for chunk in keys.chunks(BATCH) {
                found += f
                    .contains_many(chunk)
                    .unwrap()
                    .iter()
                    .filter(|&&b| b)
                    .count();
            }
        });
        assert_eq!(found, KEYS);

        timed("classic MULTI+GETBIT lookup (batched)", KEYS, &mut || {
            for chunk in keys.chunks(BATCH) {
                let mut p = redis::pipe();
                for key in chunk {
                    p.cmd("MULTI");
                    for o in offsets(key) {
                        p.cmd("GETBIT").arg("classic").arg(o);
                    }
                    p.cmd("EXEC");
                }
                let v: Vec<Value> = p.query(&mut con).unwrap();
                assert!(v.len() >= chunk.len());
            }
        });

        timed(
            "classic MULTI+GETBIT lookup, raw RESP (batched)",
            KEYS,
            &mut || {
                for chunk in keys.chunks(BATCH) {
                    let mut w = Resp::default();
                    for key in chunk {
                        w.cmd(&[b"MULTI"]);
                        for o in offsets(key) {
                            w.cmd(&[b"GETBIT", b"classic", o.to_string().as_bytes()]);
                        }
                        w.cmd(&[b"EXEC"]);
                    }
                    let v = w.send(&mut con);
                    assert_eq!(v.len(), chunk.len() * (k as usize + 2));
                }
            },
        );

        timed("classic bare GETBIT lookup (batched)", KEYS, &mut || {
            for chunk in keys.chunks(BATCH) {
                let mut p = redis::pipe();
                for key in chunk {
                    for o in offsets(key) {
                        p.cmd("GETBIT").arg("classic").arg(o);
                    }
                }
                let v: Vec<i64> = p.query(&mut con).unwrap();
                assert!(v.iter().all(|&b| b == 1));
            }
        });

        timed("redisson-style EVALSHA lookup (batched)", KEYS, &mut || {
            for chunk in keys.chunks(BATCH) {
                let v: Vec<i64> = evalsha(&has_sha, chunk).query(&mut con).unwrap();
                assert!(v.iter().all(|&b| b == 1));
            }
        });

        // Single keys: one round trip per operation for every contender.
        let few = &keys[round * SINGLE..(round + 1) * SINGLE];
        timed("bloomsled lookup (single key)", SINGLE, &mut || {
            for key in few {
                assert!(f.contains(key).unwrap());
            }
        });
        timed(
            "classic MULTI+GETBIT lookup (single key)",
            SINGLE,
            &mut || {
                for key in few {
                    let mut p = redis::pipe();
                    p.atomic();
                    for o in offsets(key) {
                        p.cmd("GETBIT").arg("classic").arg(o);
                    }
                    let v: Vec<i64> = p.query(&mut con).unwrap();
                    assert!(v.iter().all(|&b| b == 1));
                }
            },
        );
        timed("bloomsled add (single key)", SINGLE, &mut || {
            for key in few {
                f.insert(key).unwrap();
            }
        });
        timed("classic MULTI+SETBIT add (single key)", SINGLE, &mut || {
            for key in few {
                let mut p = redis::pipe();
                p.atomic();
                for o in offsets(key) {
                    p.cmd("SETBIT").arg("classic").arg(o).arg(1);
                }
                let _: Vec<i64> = p.query(&mut con).unwrap();
            }
        });
    }

    // Commands the server runs per single-key operation (round trips = commands here).
    let commands = |con: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO").arg("stats").query(con).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    let before = commands(&mut con);
    for key in &keys[..1_000] {
        f.contains(key).unwrap();
        f.insert(key).unwrap();
    }
    let per_op = (commands(&mut con) - before - 1) as f64 / 2_000.0;

    println!("\n{:<44} {:>14}", "contender", "keys/s (median)");
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (name, v) in &results {
        println!("{name:<44} {:>14.0}", median(v));
    }
    let get = |name: &str| median(&results.iter().find(|(n, _)| *n == name).unwrap().1);
    println!("\nratios (bloomsled / other, same run):");
    for (ours, theirs) in [
        (
            "bloomsled lookup (batched)",
            "classic MULTI+GETBIT lookup (batched)",
        ),
        (
            "bloomsled lookup (batched)",
            "classic bare GETBIT lookup (batched)",
        ),
        (
            "bloomsled lookup (batched)",
            "redisson-style EVALSHA lookup (batched)",
        ),
        (
            "bloomsled add (batched)",
            "classic MULTI+SETBIT add (batched)",
        ),
        (
            "bloomsled add (batched)",
            "classic MULTI+SETBIT add, raw RESP (batched)",
        ),
        (
            "bloomsled lookup (batched)",
            "classic MULTI+GETBIT lookup, raw RESP (batched)",
        ),
        (
            "bloomsled add (batched)",
            "redisson-style EVALSHA add (batched)",
        ),
        (
            "bloomsled counting add (batched)",
            "classic MULTI+SETBIT add (batched)",
        ),
        (
            "bloomsled counting remove (batched)",
            "classic MULTI+SETBIT add (batched)",
        ),
        (
            "bloomsled lookup (single key)",
            "classic MULTI+GETBIT lookup (single key)",
        ),
        (
            "bloomsled add (single key)",
            "classic MULTI+SETBIT add (single key)",
        ),
    ] {
        println!("{:>6.2}x  {ours} vs {theirs}", get(ours) / get(theirs));
    }
    println!("\nRedis commands per single-key bloomsled op: {per_op:.2} (one round trip each)");
}

/// A pipeline written as raw RESP and sent in one write.
#[derive(Default)]
struct Resp {
    buf: Vec<u8>,
    count: usize,
}

impl Resp {
    fn cmd(&mut self, args: &[&[u8]]) {
        self.buf
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            self.buf
                .extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            self.buf.extend_from_slice(a);
            self.buf.extend_from_slice(b"\r\n");
        }
        self.count += 1;
    }

    fn send(&self, con: &mut redis::Connection) -> Vec<Value> {
        use redis::ConnectionLike;
        con.req_packed_commands(&self.buf, 0, self.count).unwrap()
    }
}
