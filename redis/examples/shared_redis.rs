//! A filter shared through Redis: several crawler workers (threads here, processes or hosts
//! in production) deduplicate one URL space through one `SharedFilter`; then a counting
//! filter takes keys out again; then the filter is flushed behind their backs and every
//! worker gets an error instead of an "absent".
//!
//! Needs a Redis you may write to (it creates, then deletes, `example:*` filters):
//! `cargo run --release -p bloomsled-redis --example shared_redis [REDIS_URL] [URLS]`
//! (default `redis://127.0.0.1:6379/`, 20,000 URLs). Add `--flush` after them to see the
//! loss detection: it runs `FLUSHDB` on that database.

use std::time::Instant;

use bloomsled::FilterConfig;
use bloomsled_redis::Error;
use bloomsled_redis::{Endpoint, SharedFilter};

const WORKERS: u64 = 4;

fn url(i: u64) -> String {
    format!("https://site{}.example.com/page/{i}", i % 97)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let redis_url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    let urls: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20_000);
    let flush = args.any(|a| a == "--flush");
    let redis = Endpoint::url(&redis_url);
    let cfg = FilterConfig::new(urls).false_positive_rate(0.01);

    // Every worker runs the same code: one creates the filter, the others open it. Each
    // sees a stream of URLs that overlaps the others' by half, and crawls only the new ones.
    let t = Instant::now();
    let crawled: Vec<u64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (redis, cfg) = (redis.clone(), cfg.clone());
                s.spawn(move || -> Result<u64, Error> {
                    let seen = SharedFilter::create(&redis, "example:urls", &cfg)?;
                    let start = w * urls / (2 * WORKERS);
                    let mine: Vec<String> = (start..start + urls / 2).map(url).collect();
                    let mut crawled = 0;
                    for batch in mine.chunks(500) {
                        crawled += seen.insert_many(batch)?.iter().filter(|&&new| new).count();
                    }
                    Ok(crawled as u64)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    })
    .into_iter()
    .collect::<Result<_, _>>()?;
    let seen = SharedFilter::open(&redis, "example:urls")?;
    let distinct = (0..WORKERS)
        .flat_map(|w| {
            let start = w * urls / (2 * WORKERS);
            start..start + urls / 2
        })
        .collect::<std::collections::HashSet<_>>()
        .len();
    println!(
        "{WORKERS} workers, {} URL sightings, {distinct} distinct: crawled {} in {:.2?}",
        WORKERS * (urls / 2),
        crawled.iter().sum::<u64>(),
        t.elapsed()
    );
    let all: Vec<String> = (0..urls).map(url).collect();
    let found = seen.contains_many(&all)?;
    let misses = (0..distinct).filter(|&i| !found[i]).count();
    assert_eq!(misses, 0, "a URL a worker added answered absent");
    let st = seen.stats()?;
    println!(
        "every crawled URL answers maybe; fill {:.3}, ~{} items, estimated FPR {:.4}%, {} bytes \
         in Redis over {} keys",
        st.fill_ratio,
        st.estimated_items,
        st.estimated_fpr * 100.0,
        st.redis_bytes,
        st.shape.shards
    );

    // The counting variant: sessions come and go.
    let sessions = SharedFilter::create_counting(&redis, "example:sessions", &cfg)?;
    let tokens: Vec<String> = (0..1_000).map(|i| format!("token-{i}")).collect();
    sessions.insert_many(&tokens)?;
    let removed = sessions.remove_many(&tokens[..500])?;
    let left = sessions.contains_many(&tokens)?;
    assert!(left[500..].iter().all(|&b| b));
    println!(
        "counting: removed {} of 500 sessions, {} of the 500 left answer maybe, {} of the \
         removed still do (false positives)",
        removed.iter().filter(|&&r| r).count(),
        left[500..].iter().filter(|&&b| b).count(),
        left[..500].iter().filter(|&&b| b).count()
    );

    if flush {
        // The data vanishes behind the workers' backs (a restart without persistence, a
        // failover to an empty replica, an eviction): the next lookup says so.
        let mut con = redis::Client::open(redis_url.as_str())?.get_connection()?;
        redis::cmd("FLUSHDB").exec(&mut con)?;
        match seen.contains(all[0].as_bytes()) {
            Err(e @ Error::SharedFilterLost { .. }) => println!("after FLUSHDB: {e}"),
            other => panic!("a lost filter answered {other:?}"),
        }
    } else {
        seen.destroy()?;
        sessions.destroy()?;
    }
    Ok(())
}
