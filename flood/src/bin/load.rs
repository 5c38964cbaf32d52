//! The load generator: floods the service on loopback with absent ids mixed with present
//! ones, from CONNECTIONS keep-alive connections, for at most SECONDS and REQUESTS, then
//! prints requests/s, p50/p99 latency and store reads/s (from the service's `/metrics`).
//! A connection that fails (the service killed) is retried every 2 ms: the report then
//! also gives how long the service was down and how long until it was back at full speed.
//!
//! ```text
//! flood-load ADDR ITEMS SECONDS REQUESTS [CONNECTIONS] [ABSENT_PERCENT] [SHAPE]
//! ```
//!
//! SHAPE says how absent ids are drawn: `uniform` (default: each a new random id),
//! `zipf` (from a million absent ids with Zipf skew 1.0, as real floods repeat: bots
//! retrying the same missing ids), or `replay:FILE` (uniformly from the ids in FILE, one a
//! line: false positives found by probing, replayed; `flood-service false-positives`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloomsled_flood::{absent_id, present_id};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// Buckets of the timeline of answers.
const BUCKET: Duration = Duration::from_millis(10);

/// How absent ids are drawn (see the crate docs).
enum Shape {
    Uniform,
    Zipf,
    Replay(Vec<String>),
}

/// Absent ids a `zipf` flood draws from.
const ZIPF_IDS: f64 = 1_000_000.0;

impl Shape {
    fn parse(s: &str) -> Result<Shape, Failure> {
        Ok(match s {
            "uniform" => Shape::Uniform,
            "zipf" => Shape::Zipf,
            _ => match s.strip_prefix("replay:") {
                Some(file) => {
                    let ids: Vec<String> = std::fs::read_to_string(file)?
                        .lines()
                        .map(str::to_owned)
                        .collect();
                    if ids.is_empty() {
                        return Err(format!("{file}: no ids").into());
                    }
                    Shape::Replay(ids)
                }
                None => return Err(format!("unknown shape {s:?}").into()),
            },
        })
    }

    /// An absent id from the random number `r`.
    fn absent(&self, r: u64) -> String {
        match self {
            Shape::Uniform => absent_id(r >> 8),
            // Zipf with skew 1 over ranks 1..=N, by inverting its continuous CDF: rank
            // (N + 1)^u for u uniform in [0, 1), so P(rank) is about 1 / (rank ln N).
            Shape::Zipf => {
                let u = (r >> 11) as f64 / (1u64 << 53) as f64;
                absent_id((ZIPF_IDS + 1.0).powf(u) as u64)
            }
            Shape::Replay(ids) => ids[((r >> 8) % ids.len() as u64) as usize].clone(),
        }
    }
}

struct Run {
    addr: SocketAddr,
    items: u64,
    absent_percent: u64,
    shape: Shape,
    deadline: Instant,
    left: AtomicU64,
    start: Instant,
    /// Answers per bucket since `start`.
    timeline: Vec<AtomicU64>,
    errors: AtomicU64,
    wrong: AtomicU64,
}

fn main() -> Result<(), Failure> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 4 {
        eprintln!(
            "usage: flood-load ADDR ITEMS SECONDS REQUESTS [CONNECTIONS] [ABSENT_PERCENT] \
             [uniform|zipf|replay:FILE]"
        );
        std::process::exit(2);
    }
    let seconds: f64 = a[2].parse()?;
    let connections: usize = a.get(4).map_or(Ok(16), |v| v.parse())?;
    let start = Instant::now();
    let run = Arc::new(Run {
        addr: a[0].parse()?,
        items: a[1].parse()?,
        absent_percent: a.get(5).map_or(Ok(90), |v| v.parse())?,
        shape: Shape::parse(a.get(6).map_or("uniform", String::as_str))?,
        deadline: start + Duration::from_secs_f64(seconds),
        left: AtomicU64::new(a[3].parse()?),
        start,
        timeline: (0..=(seconds / BUCKET.as_secs_f64()) as usize + 1)
            .map(|_| AtomicU64::new(0))
            .collect(),
        errors: AtomicU64::new(0),
        wrong: AtomicU64::new(0),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let reads_before = store_reads(run.addr).await;
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..connections)
            .map(|c| tokio::spawn(flood(run.clone(), c as u64)))
            .collect();
        let mut latencies = Vec::new();
        for t in tasks {
            latencies.extend(t.await?);
        }
        let elapsed = t0.elapsed().as_secs_f64();
        let reads_after = store_reads(run.addr).await;
        report(&run, &mut latencies, elapsed, reads_before, reads_after);
        Ok::<(), Failure>(())
    })
}

/// One connection's requests; returns their latencies in µs.
async fn flood(run: Arc<Run>, seed: u64) -> Vec<u32> {
    let mut rng = bloomsled_flood::mix(seed + 1);
    let mut latencies = Vec::new();
    let mut sender = None;
    while Instant::now() < run.deadline && take(&run.left) {
        rng = bloomsled_flood::mix(rng);
        let absent = rng % 100 < run.absent_percent;
        let id = if absent {
            run.shape.absent(rng)
        } else {
            present_id((rng >> 8) % run.items)
        };
        loop {
            if Instant::now() >= run.deadline {
                return latencies;
            }
            if sender.is_none() {
                sender = connect(run.addr).await;
                if sender.is_none() {
                    run.errors.fetch_add(1, Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
            }
            let s = sender.as_mut().expect("connected");
            let t = Instant::now();
            match get(s, &format!("/item/{id}")).await {
                Ok(status) => {
                    let us = t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                    latencies.push(us);
                    let bucket = (run.start.elapsed().as_nanos() / BUCKET.as_nanos()) as usize;
                    if let Some(b) = run.timeline.get(bucket) {
                        b.fetch_add(1, Relaxed);
                    }
                    if status != if absent { 404 } else { 200 } {
                        run.wrong.fetch_add(1, Relaxed);
                    }
                    break;
                }
                Err(_) => {
                    // The service went away: the same request again on a new connection.
                    run.errors.fetch_add(1, Relaxed);
                    sender = None;
                }
            }
        }
    }
    latencies
}

fn take(left: &AtomicU64) -> bool {
    left.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(addr: SocketAddr) -> Option<Sender> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.set_nodelay(true).ok()?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// One GET; its status once its body is read.
async fn get(s: &mut Sender, path: &str) -> Result<u16, Failure> {
    s.ready().await?;
    let req = hyper::Request::get(path)
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())?;
    let res = s.send_request(req).await?;
    let status = res.status().as_u16();
    res.into_body().collect().await?;
    Ok(status)
}

/// The service's store reads so far: bloomsled's store lookups of the items tree, or the
/// plain-sled baseline's own counter. `None` if `/metrics` cannot be read.
async fn store_reads(addr: SocketAddr) -> Option<f64> {
    let mut s = connect(addr).await?;
    s.ready().await.ok()?;
    let req = hyper::Request::get("/metrics")
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())
        .ok()?;
    let body = s
        .send_request(req)
        .await
        .ok()?
        .into_body()
        .collect()
        .await
        .ok()?;
    let text = String::from_utf8(body.to_bytes().to_vec()).ok()?;
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).ok()?;
    let reads = scrape
        .samples
        .iter()
        .filter(|s| {
            s.metric == "flood_store_reads_total"
                || (s.metric == bloomsled::telemetry::STORE_LOOKUPS
                    && s.labels.get("tree") == Some(bloomsled_flood::TREE))
        })
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum();
    Some(reads)
}

/// The longest run of empty buckets in `t[first..=last]`: its start and length.
fn longest_gap(t: &[u64], first: usize, last: usize) -> (usize, usize) {
    let (mut gap_start, mut gap_len, mut i) = (0, 0, first);
    while i <= last {
        if t[i] == 0 {
            let j = (i..=last).find(|&j| t[j] > 0).unwrap_or(last);
            if j - i > gap_len {
                (gap_start, gap_len) = (i, j - i);
            }
            i = j;
        }
        i += 1;
    }
    (gap_start, gap_len)
}

fn report(run: &Run, lat: &mut [u32], elapsed: f64, before: Option<f64>, after: Option<f64>) {
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let n = lat.len();
    println!(
        "requests {n}  req/s {:.0}  p50 {} us  p99 {} us  errors {}  wrong answers {}",
        n as f64 / elapsed,
        pct(0.50),
        pct(0.99),
        run.errors.load(Relaxed),
        run.wrong.load(Relaxed)
    );
    match (before, after) {
        (Some(b), Some(a)) if run.errors.load(Relaxed) == 0 => {
            println!("store reads/s {:.0}", (a - b) / elapsed)
        }
        _ => println!("store reads/s n/a (the service restarted: its counters began again)"),
    }
    // The longest stretch without an answer, and how long after it the rate was back at
    // 90% of the median rate before it (over 200 ms windows).
    let t: Vec<u64> = run.timeline.iter().map(|b| b.load(Relaxed)).collect();
    let first = t.iter().position(|&c| c > 0).unwrap_or(0);
    let last = t.iter().rposition(|&c| c > 0).unwrap_or(0);
    let (gap_start, gap_len) = longest_gap(&t, first, last);
    let ms = BUCKET.as_millis() as usize;
    if gap_len * ms < 100 {
        return;
    }
    let window = 200 / ms;
    let mut before: Vec<u64> = (first..gap_start.saturating_sub(window))
        .step_by(window)
        .map(|s| t[s..s + window].iter().sum())
        .collect();
    before.sort_unstable();
    let full = before.get(before.len() / 2).copied().unwrap_or(0) * 9 / 10;
    let back = gap_start + gap_len;
    let full_at = (back..=last.saturating_sub(window))
        .find(|&s| t[s..s + window].iter().sum::<u64>() >= full);
    println!(
        "down {} ms (no answer after the last one before it); back at full speed \
         (>= 90% of {} req/s) {}",
        gap_len * ms,
        full * 5 * 10 / 9,
        match full_at {
            Some(s) => format!(
                "{} ms after the last answer before it",
                (s - gap_start) * ms
            ),
            None => "not within the run".into(),
        }
    );
}
