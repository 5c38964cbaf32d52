//! Crawler URL dedup: a crawler walks a synthetic link graph full of cycles and asks
//! bloomsled "have I seen this URL?" before fetching. Prints pages fetched, duplicate
//! fetches avoided, how many of those the filter answered without touching the store,
//! and memory.
//!
//! `cargo run --release --example crawler_dedup [PAGES]` (default 200,000 pages).

use std::collections::VecDeque;
use std::time::Instant;

/// Page `i` links to `LINKS` others: its neighbours, a few random pages (cycles
/// everywhere), and the home page.
const LINKS: u64 = 8;

fn url(page: u64) -> String {
    format!(
        "https://site{}.example.com/articles/{page:08}.html",
        page % 211
    )
}

fn links(page: u64, pages: u64) -> impl Iterator<Item = u64> {
    let mut x = page.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..LINKS).map(move |i| match i {
        0 => 0,
        1 => (page + 1) % pages,
        2 => page.saturating_sub(1),
        _ => {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % pages
        }
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pages: u64 = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|e| format!("PAGES must be a number: {e}"))?,
        None => 200_000,
    };
    if pages == 0 {
        return Err("PAGES must be at least 1".into());
    }
    let dir = tempfile::tempdir()?;
    let seen = bloomsled::Config::new()
        .path(dir.path())
        .expected_items(pages)
        .false_positive_rate(0.001)
        .open()?;

    let start = Instant::now();
    let mut frontier = VecDeque::from([0u64]);
    seen.insert(url(0), &b""[..])?;
    let (mut fetched, mut duplicates, mut links_seen) = (0u64, 0u64, 0u64);
    while let Some(page) = frontier.pop_front() {
        fetched += 1; // "fetch" the page, then follow its links
        for next in links(page, pages) {
            links_seen += 1;
            let u = url(next);
            // The whole dedup: a filter "no" returns without a store lookup.
            if seen.contains_key(&u)? {
                duplicates += 1;
                continue;
            }
            seen.insert(u, &b""[..])?;
            frontier.push_back(next);
        }
    }
    let elapsed = start.elapsed();
    let s = seen.stats();
    println!("crawled {fetched} pages of {pages} in {elapsed:.2?}, following {links_seen} links");
    println!(
        "duplicate fetches avoided: {duplicates} ({:.1}% of links)",
        100.0 * duplicates as f64 / links_seen as f64
    );
    println!(
        "new-URL checks answered by the filter alone: {} of {} lookups; false positives {}",
        s.store_lookups_skipped, s.lookups, s.false_positives
    );
    println!(
        "filter: {:.1} KiB ({:.1} bits per URL), store on disk: {:.1} MiB",
        s.memory_bytes as f64 / 1024.0,
        s.bits_per_key,
        seen.size_on_disk()? as f64 / (1 << 20) as f64
    );
    // Every page reachable from the home page was fetched exactly once.
    assert_eq!(
        fetched as usize,
        seen.len(),
        "a page was fetched twice or lost"
    );
    Ok(())
}
