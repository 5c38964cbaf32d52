//! A recrawl window: "have I crawled this URL in the last 7 days?" A crawler fetches a URL
//! only if the window does not hold it; a URL crawled more than 7 days ago has aged out with
//! its generation and is crawled again. Days pass on a `ManualClock` so the example runs in
//! a second; a real crawler keeps the default wall clock (and the window's times survive
//! restarts).
//!
//! `cargo run --release --example recrawl_window`

use std::time::Duration;

use bloomsled::clock::ManualClock;
use bloomsled::window::WindowConfig;
use bloomsled::TreeConfig;

const DAY: Duration = Duration::from_secs(86_400);

fn url(i: u64) -> String {
    format!("https://site{}.example.com/page/{i}", i % 97)
}

fn main() -> Result<(), bloomsled::Error> {
    let dir = std::env::temp_dir().join(format!("bloomsled-recrawl-{}", std::process::id()));
    let db = bloomsled::Config::new().path(&dir).open()?;
    let clock = ManualClock::new(1_700_006_400_000); // a midnight, UTC
                                                     // 7 days in 7 generations of one day; each day's filter sized for 20,000 URLs.
    let crawled = db.open_window(
        "crawled",
        WindowConfig::new(7 * DAY, 7)
            .tree_config(TreeConfig::new().expected_items(20_000))
            .clock(clock.clone()),
    )?;
    // Every day the crawler meets 10,000 URLs: the site's 5,000 hubs, and 5,000 new pages.
    let mut fetched_per_day = vec![];
    for day in 0..10u64 {
        let hubs = 0..5_000u64;
        let new = (1_000_000 + day * 5_000)..(1_000_000 + (day + 1) * 5_000);
        let mut fetched = 0;
        for i in hubs.chain(new) {
            let u = url(i);
            if !crawled.contains_key(&u)? {
                // fetch(u) ... then remember when:
                crawled.insert(&u, &day.to_le_bytes()[..])?;
                fetched += 1;
            }
        }
        fetched_per_day.push(fetched);
        clock.advance(DAY);
    }
    println!("URLs fetched per day: {fetched_per_day:?}");
    // Day 0 fetches the hubs and the new pages; days 1-6 only the new pages; on day 7 the
    // hubs crawled on day 0 have aged out (7 days) and are fetched again.
    assert_eq!(fetched_per_day[0], 10_000);
    assert!(fetched_per_day[1..7].iter().all(|&f| f == 5_000));
    assert_eq!(fetched_per_day[7], 10_000);
    let s = crawled.stats();
    println!(
        "{} live generations, {} lookups, {} answered by the filters alone",
        s.live.len(),
        s.lookups,
        s.store_lookups_skipped
    );
    drop(crawled);
    db.close()?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
