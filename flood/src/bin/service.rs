//! The example service: `GET /item/{id}` answers the item's value (200) or 404, from a
//! bloomsled tree (`--mode filter`: the filter answers absent ids, the store is read on a
//! blocking thread only for the ids it lets through) or from plain sled reading the same
//! files (`--mode sled`: every request reads the store). `GET /metrics` is the Prometheus
//! text format: bloomsled's series, recorded when scraped, and `flood_store_reads_total`.
//!
//! `--mode filter-nomemory` is `filter` with the tree's false-positive memory off
//! (`Config::false_positive_memory(0)`): every replay of a false positive reads the store.
//!
//! ```text
//! flood-service load  DIR ITEMS [VALUE_BYTES]       fill DIR with ITEMS items, then exit
//! flood-service serve DIR ADDR filter|filter-nomemory|sled [CACHE_MB]
//! flood-service false-positives DIR N               print N absent ids the filter passes
//! ```
//!
//! `false-positives` stands in for an attacker who found them by probing the service (each
//! one's store read gives it away by its latency): the load generator's `replay` shape
//! replays them.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bloomsled_flood::{absent_id, key, present_id, TREE};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

type Failure = Box<dyn std::error::Error + Send + Sync>;

fn usage() -> ! {
    eprintln!(
        "usage: flood-service load DIR ITEMS [VALUE_BYTES]\n       \
         flood-service serve DIR ADDR filter|filter-nomemory|sled [CACHE_MB]\n       \
         flood-service false-positives DIR N"
    );
    std::process::exit(2)
}

fn main() -> Result<(), Failure> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("load") if args.len() >= 3 => load(
            &args[1],
            args[2].parse()?,
            args.get(3).map_or(Ok(200), |v| v.parse())?,
        ),
        Some("serve") if args.len() >= 4 => serve(
            &args[1],
            &args[2],
            &args[3],
            args.get(4).map_or(Ok(32), |v| v.parse())?,
        ),
        Some("false-positives") if args.len() >= 3 => false_positives(&args[1], args[2].parse()?),
        _ => usage(),
    }
}

/// Prints `n` absent ids (of `bloomsled_flood::absent_id`) the filter passes.
fn false_positives(dir: &str, n: usize) -> Result<(), Failure> {
    let db = bloomsled::Config::new().path(dir).open()?;
    let tree = db.open_tree(TREE)?;
    tree.wait_for_filter(std::time::Duration::from_secs(600))?;
    let mut found = 0;
    for i in 0.. {
        let id = absent_id(i);
        if tree.may_contain(key(&id)) {
            println!("{id}");
            found += 1;
            if found == n {
                break;
            }
        }
    }
    Ok(())
}

/// Fills the store with `items` items of `value_bytes` bytes, snapshots and closes.
fn load(dir: &str, items: u64, value_bytes: usize) -> Result<(), Failure> {
    let start = Instant::now();
    let db = bloomsled::Config::new()
        .path(dir)
        .expected_items(items)
        .open()?;
    let tree = db.open_tree(TREE)?;
    let value = vec![b'v'; value_bytes];
    for from in (0..items).step_by(10_000) {
        let mut batch = bloomsled::Batch::default();
        for i in from..(from + 10_000).min(items) {
            batch.insert(key(&present_id(i)), value.clone());
        }
        tree.apply_batch(batch)?;
    }
    drop(tree);
    db.close()?;
    println!(
        "loaded {items} items of {value_bytes} B into {dir} in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Where the service reads items.
#[derive(Clone)]
enum Store {
    /// bloomsled: the filter first.
    Filter(bloomsled::Db, bloomsled::Tree),
    /// Plain sled on the same files.
    Sled(sled::Tree),
}

#[derive(Clone)]
struct App {
    store: Store,
    prometheus: PrometheusHandle,
}

fn serve(dir: &str, addr: &str, mode: &str, cache_mb: u64) -> Result<(), Failure> {
    let start = Instant::now();
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let cache = cache_mb << 20;
    let store = match mode {
        "filter" | "filter-nomemory" => {
            let mut config = bloomsled::Config::new().path(dir).cache_capacity(cache);
            if mode == "filter-nomemory" {
                config = config.false_positive_memory(0);
            }
            let db = config.open()?;
            let tree = db.open_tree(TREE)?;
            Store::Filter(db, tree)
        }
        "sled" => Store::Sled(
            sled::Config::new()
                .path(dir)
                .cache_capacity(cache)
                .open()?
                .open_tree(TREE)?,
        ),
        _ => usage(),
    };
    let app = App { store, prometheus };
    let router = Router::new()
        .route("/item/{id}", get(item))
        .route("/metrics", get(metrics_text))
        .with_state(Arc::new(app));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        println!(
            "serving {mode} on {} ({:.0} ms after start)",
            listener.local_addr()?,
            start.elapsed().as_secs_f64() * 1e3
        );
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        Ok::<(), Failure>(())
    })?;
    Ok(())
}

async fn item(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    let k = key(&id);
    let found = match &app.store {
        Store::Filter(_, tree) => {
            // Nanoseconds, on the runtime's worker: an absent id ends here.
            if !tree.may_contain(&k) {
                return StatusCode::NOT_FOUND.into_response();
            }
            let tree = tree.clone();
            tokio::task::spawn_blocking(move || tree.get(&k).map_err(|e| e.to_string())).await
        }
        Store::Sled(tree) => {
            metrics::counter!("flood_store_reads_total").increment(1);
            let tree = tree.clone();
            tokio::task::spawn_blocking(move || tree.get(&k).map_err(|e| e.to_string())).await
        }
    };
    match found {
        Ok(Ok(Some(v))) => v.to_vec().into_response(),
        Ok(Ok(None)) => StatusCode::NOT_FOUND.into_response(),
        // A store error is an error, never "absent".
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn metrics_text(State(app): State<Arc<App>>) -> String {
    if let Store::Filter(db, _) = &app.store {
        let db = db.clone();
        // Reads every filter word: off the runtime's workers.
        let _ = tokio::task::spawn_blocking(move || db.record_metrics()).await;
    }
    // Present from the first scrape, so that a reader sees 0 rather than nothing.
    metrics::counter!("flood_store_reads_total").increment(0);
    app.prometheus.render()
}
