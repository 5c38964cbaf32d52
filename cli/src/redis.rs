//! `bloomsled redis …`: create, fill, query, inspect, push and pull a filter shared through
//! Redis or Redis Cluster (see the `bloomsled-redis` crate).
//!
//! Output contract for scripts: `check` prints one line per key, `maybe<TAB>key` or
//! `absent<TAB>key`, and exits 0; on any error (filter lost, shape mismatch, server down)
//! it prints a message on stderr, exits non-zero, and prints no line for a key it could
//! not answer.

mod duration;

use std::fs;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::output::progress;
use bloomsled::hash::classic::ClassicHash;
use bloomsled::{Filter, FilterConfig};
use bloomsled_redis::{ClassicFilter, Endpoint, SharedFilter, SharedOptions, SharedStats};
use bloomsled_redis::{SharedWindow, SharedWindowConfig, SharedWindowStats};
use clap::{Args, Subcommand};
use serde_json::json;

/// Keys per pipelined batch sent to Redis.
const BATCH: usize = 4096;

/// Where the shared filter lives.
#[derive(Args, Debug)]
pub struct Target {
    /// The shared filter's name.
    name: String,
    /// Redis URL, e.g. redis://127.0.0.1:6379/; with --cluster, the URLs of one or more of
    /// the cluster's nodes, comma-separated.
    #[arg(long)]
    url: Option<String>,
    /// The filter is on a Redis Cluster, reached through the nodes --url names. A flag: it
    /// never takes the next argument.
    #[arg(long)]
    cluster: bool,
}

impl Target {
    fn endpoint(&self) -> Result<Endpoint, String> {
        let split = |s: &str| -> Vec<String> {
            s.split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let urls = self.url.as_deref().map(split).unwrap_or_default();
        match (urls.len(), self.cluster) {
            (0, false) => Err("give --url URL (a cluster: --url URL,URL,… --cluster)".into()),
            (0, true) => Err("--cluster needs its nodes' URLs: --url URL,URL,…".into()),
            (1, false) => Ok(Endpoint::url(urls[0].clone())),
            (_, false) => Err("several URLs name a Redis Cluster's nodes: add --cluster".into()),
            (_, true) => Ok(Endpoint::cluster(urls)),
        }
    }

    fn open(&self) -> Result<SharedFilter, String> {
        let ep = self.endpoint()?;
        SharedFilter::open(&ep, &self.name).map_err(|e| match e {
            bloomsled_redis::Error::SharedFilterNotFound { .. }
                if SharedWindow::exists(&ep, &self.name).unwrap_or(false) =>
            {
                format!(
                    "{:?} is a shared window: this command works on plain shared filters",
                    self.name
                )
            }
            e => e.to_string(),
        })
    }

    /// The window NAME, if NAME is a window (its record exists).
    fn open_window(&self) -> Result<Option<SharedWindow>, String> {
        let ep = self.endpoint()?;
        if !SharedWindow::exists(&ep, &self.name).map_err(|e| e.to_string())? {
            return Ok(None);
        }
        SharedWindow::open(&ep, &self.name)
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

/// Which layout NAME has: bloomsled's, or the PHP class's bucket.
#[derive(Args, Debug)]
pub struct LayoutArgs {
    /// `bloomsled` (default), or `php`: NAME is the bucket of a PHP `BloomFilterRedis`
    /// filter (one bitmap, classic hashes as bit offsets).
    #[arg(long, default_value = "bloomsled", value_parser = ["bloomsled", "php"])]
    layout: String,
    /// With `--layout php`: the PHP class's `$hashFunction` list in order, e.g.
    /// `BKDR,SDBM,JS` (names with or without `Hash`, any case, repeats allowed).
    #[arg(long)]
    hashes: Option<String>,
}

/// A filter of either layout and the keys to give it, one per line.
#[derive(Args, Debug)]
pub struct KeyInput {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    layout: LayoutArgs,
    /// Input file, or `-` for standard input.
    #[arg(default_value = "-")]
    file: String,
}

/// The filter a command works on: either layout answers the same two questions.
enum AnyShared {
    Blocked(SharedFilter),
    // Boxed: a classic filter's handle is twice the size of the others'.
    Classic(Box<ClassicFilter>),
    Window(SharedWindow),
}

impl AnyShared {
    fn open(target: &Target, layout: &LayoutArgs) -> Result<Self, String> {
        match (layout.layout.as_str(), &layout.hashes) {
            ("php", Some(list)) => {
                let hashes = ClassicHash::parse_list(list).map_err(|e| e.to_string())?;
                ClassicFilter::open(&target.endpoint()?, &target.name, &hashes)
                    .map(|f| AnyShared::Classic(Box::new(f)))
                    .map_err(|e| e.to_string())
            }
            ("php", None) => Err("--layout php needs --hashes, e.g. --hashes BKDR,SDBM,JS".into()),
            (_, Some(_)) => Err("--hashes goes with --layout php".into()),
            _ => match target.open_window()? {
                Some(w) => Ok(AnyShared::Window(w)),
                None => target.open().map(AnyShared::Blocked),
            },
        }
    }

    fn add_many(&self, keys: &[Vec<u8>]) -> bloomsled_redis::Result<Vec<bool>> {
        match self {
            AnyShared::Blocked(f) => f.insert_many(keys),
            AnyShared::Classic(f) => f.insert_many(keys),
            AnyShared::Window(w) => w.insert_many(keys),
        }
    }

    fn contains_many(&self, keys: &[Vec<u8>]) -> bloomsled_redis::Result<Vec<bool>> {
        match self {
            AnyShared::Blocked(f) => f.contains_many(keys),
            AnyShared::Classic(f) => f.contains_many(keys),
            AnyShared::Window(w) => w.contains_many(keys),
        }
    }
}

/// The `redis` command group.
#[derive(Subcommand, Debug)]
pub enum RedisCommand {
    /// Create a shared filter (or open it if it exists with the same shape); with
    /// `--window`, a shared window of keys that expire.
    Create {
        #[command(flatten)]
        target: Target,
        /// Number of keys the filter is sized for.
        #[arg(long)]
        items: u64,
        /// Target false-positive rate at that many keys.
        #[arg(long, default_value_t = 0.01, conflicts_with = "bits_per_key")]
        fpr: f64,
        /// Size by bits per key instead of by rate.
        #[arg(long)]
        bits_per_key: Option<f64>,
        /// Number of Redis keys to spread the blocks over (default: one per 64 MiB, at
        /// least 16).
        #[arg(long)]
        shards: Option<u64>,
        /// A 4-bit counter per position instead of a bit (four times the memory), so that
        /// `redis remove` can take keys out again.
        #[arg(long)]
        counting: bool,
        /// Make a window instead: keys are forgotten this long after they were added
        /// (e.g. 7d, 12h, 30m, 90s, 500ms). --items and --fpr then size each generation; a
        /// lookup asks every generation, so an absent key is "maybe" at about generations
        /// × --fpr.
        #[arg(long, value_parser = duration::parse, conflicts_with = "counting")]
        window: Option<std::time::Duration>,
        /// With --window: the number of generations, 1 to 256; each covers window/generations,
        /// which must be a whole number of milliseconds.
        #[arg(long, requires = "window", default_value_t = 7)]
        generations: u32,
        /// With --window: how long a generation's Redis keys outlive it (default: one
        /// generation, at most a minute).
        #[arg(long, value_parser = duration::parse, requires = "window")]
        grace: Option<std::time::Duration>,
    },
    /// Add keys, one per line, from FILE or `-` (standard input).
    Add(KeyInput),
    /// Print `maybe<TAB>key` or `absent<TAB>key` for each line of FILE or `-`.
    Check(KeyInput),
    /// Remove keys, one per line, from FILE or `-` (a filter made with `create --counting`;
    /// remove only keys that were added).
    Remove {
        #[command(flatten)]
        target: Target,
        /// Input file, or `-` for standard input.
        #[arg(default_value = "-")]
        file: String,
    },
    /// Shape, fill and estimated items and false-positive rate.
    #[command(alias = "info")]
    Stats {
        #[command(flatten)]
        target: Target,
    },
    /// OR a local database tree's filter into the shared filter (byte copy when the shapes
    /// agree, otherwise every key of the tree is added).
    Push {
        /// Database directory.
        db: PathBuf,
        /// Tree to push (default: the default tree).
        #[arg(long)]
        tree: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Save a bit-identical local copy of the shared filter to FILE
    /// (`bloomsled::Filter::from_bytes` reads it).
    Pull {
        #[command(flatten)]
        target: Target,
        /// Output file.
        file: PathBuf,
    },
}

/// Runs one `redis` subcommand.
pub fn run(cmd: &RedisCommand, json_mode: bool) -> Result<ExitCode, String> {
    match cmd {
        RedisCommand::Create {
            target,
            items,
            fpr,
            bits_per_key,
            shards,
            counting,
            window,
            generations,
            grace,
        } => {
            let mut cfg = FilterConfig::new(*items).false_positive_rate(*fpr);
            if let Some(b) = bits_per_key {
                cfg = cfg.bits_per_key(*b);
            }
            match window {
                Some(span) => {
                    create_window(target, cfg, *span, *generations, *shards, *grace, json_mode)?
                }
                None => create_filter(target, cfg, *shards, *counting, json_mode)?,
            }
        }
        RedisCommand::Add(k) => add(&AnyShared::open(&k.target, &k.layout)?, &k.file, json_mode)?,
        RedisCommand::Check(k) => check(&AnyShared::open(&k.target, &k.layout)?, &k.file)?,
        RedisCommand::Remove { target, file } => remove(&target.open()?, file, json_mode)?,
        RedisCommand::Stats { target } => match target.open_window()? {
            Some(w) => window_stats(&w.stats().map_err(|e| e.to_string())?, json_mode),
            None => stats(
                &target.open()?.stats().map_err(|e| e.to_string())?,
                json_mode,
            ),
        },
        RedisCommand::Push { db, tree, target } => push(db, tree.as_deref(), target, json_mode)?,
        RedisCommand::Pull { target, file } => {
            let f = target.open()?.pull().map_err(|e| e.to_string())?;
            write_filter(&f, file)?;
            report(
                json_mode,
                json!({"file": file, "bytes": f.memory_bytes()}),
                || {
                    format!(
                        "pulled {} bytes of filter into {}",
                        f.memory_bytes(),
                        file.display()
                    )
                },
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `redis create --window`: a shared window of `generations` filters, each shaped by `cfg`.
fn create_window(
    target: &Target,
    cfg: FilterConfig,
    span: std::time::Duration,
    generations: u32,
    shards: Option<u64>,
    grace: Option<std::time::Duration>,
    json_mode: bool,
) -> Result<(), String> {
    let mut wc = SharedWindowConfig::new(span, generations, cfg);
    if let Some(s) = shards {
        wc = wc.shards(s);
    }
    if let Some(g) = grace {
        wc = wc.grace(g);
    }
    let w =
        SharedWindow::create(&target.endpoint()?, &target.name, &wc).map_err(|e| e.to_string())?;
    let s = w.shape();
    report(
        json_mode,
        json!({"name": w.name(), "window_ms": w.span().as_millis() as u64,
               "generations": w.generations(),
               "generation_ms": w.width().as_millis() as u64,
               "blocks": s.num_blocks, "k": s.num_hashes, "shards": s.shards,
               "capacity": s.capacity, "incarnation": w.incarnation()}),
        || {
            format!(
                "{}: window of {:?} in {} generations of {:?}; each {s}",
                w.name(),
                w.span(),
                w.generations(),
                w.width()
            )
        },
    );
    Ok(())
}

/// `redis create`: a shared filter shaped by `cfg`.
fn create_filter(
    target: &Target,
    cfg: FilterConfig,
    shards: Option<u64>,
    counting: bool,
    json_mode: bool,
) -> Result<(), String> {
    let options = SharedOptions { shards, counting };
    let f = SharedFilter::create_with(&target.endpoint()?, &target.name, &cfg, &options)
        .map_err(|e| e.to_string())?;
    let s = f.shape();
    report(
        json_mode,
        json!({"name": f.name(), "blocks": s.num_blocks, "k": s.num_hashes,
               "shards": s.shards, "capacity": s.capacity, "counting": s.counting,
               "incarnation": f.incarnation()}),
        || format!("{}: {s}", f.name()),
    );
    Ok(())
}

/// Reads lines (without `\r\n`), skipping empty ones, in batches.
fn for_each_batch(
    file: &str,
    what: &str,
    mut each: impl FnMut(&[Vec<u8>]) -> Result<(), String>,
) -> Result<u64, String> {
    let (input, len): (Box<dyn Read>, Option<u64>) = if file == "-" {
        (Box::new(io::stdin()), None)
    } else {
        let f = fs::File::open(file).map_err(|e| format!("{file}: {e}"))?;
        let len = f.metadata().map(|m| m.len()).ok();
        (Box::new(f), len)
    };
    let bar = progress(len, what);
    let mut batch = Vec::with_capacity(BATCH);
    let mut n = 0u64;
    for line in BufReader::new(input).split(b'\n') {
        let mut line = line.map_err(|e| format!("{file}: {e}"))?;
        bar.inc(line.len() as u64 + 1);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            continue;
        }
        batch.push(line);
        if batch.len() == BATCH {
            each(&batch)?;
            n += batch.len() as u64;
            batch.clear();
        }
    }
    each(&batch)?;
    n += batch.len() as u64;
    bar.finish_and_clear();
    Ok(n)
}

fn add(f: &AnyShared, file: &str, json_mode: bool) -> Result<(), String> {
    let mut new = 0u64;
    let n = for_each_batch(file, "adding", |keys| {
        let fresh = f.add_many(keys).map_err(|e| e.to_string())?;
        new += fresh.iter().filter(|&&b| b).count() as u64;
        Ok(())
    })?;
    report(json_mode, json!({"added": n, "new": new}), || {
        format!("added {n} keys ({new} new)")
    });
    Ok(())
}

fn remove(f: &SharedFilter, file: &str, json_mode: bool) -> Result<(), String> {
    let mut removed = 0u64;
    let n = for_each_batch(file, "removing", |keys| {
        let done = f.remove_many(keys).map_err(|e| e.to_string())?;
        removed += done.iter().filter(|&&b| b).count() as u64;
        Ok(())
    })?;
    let absent = n - removed;
    report(
        json_mode,
        json!({"read": n, "removed": removed, "absent": absent}),
        || format!("removed {removed} of {n} keys ({absent} were not in the filter)"),
    );
    Ok(())
}

fn check(f: &AnyShared, file: &str) -> Result<(), String> {
    let mut out = BufWriter::new(io::stdout().lock());
    for_each_batch(file, "checking", |keys| {
        // The whole batch is answered or none of it: no line for a key without an answer.
        let answers = f.contains_many(keys).map_err(|e| e.to_string())?;
        for (k, maybe) in keys.iter().zip(answers) {
            let word: &[u8] = if maybe { b"maybe\t" } else { b"absent\t" };
            out.write_all(word)
                .and_then(|_| out.write_all(k))
                .and_then(|_| out.write_all(b"\n"))
                .map_err(|e| e.to_string())?;
        }
        out.flush().map_err(|e| e.to_string())
    })?;
    Ok(())
}

fn stats(s: &SharedStats, json_mode: bool) {
    report(
        json_mode,
        json!({
            "name": s.name, "blocks": s.shape.num_blocks, "k": s.shape.num_hashes,
            "seed": s.shape.seed, "shards": s.shape.shards, "capacity": s.shape.capacity,
            "counting": s.shape.counting,
            "incarnation": s.incarnation, "bits": s.num_bits, "ones": s.ones, "fill_ratio": s.fill_ratio,
            "estimated_items": s.estimated_items, "estimated_fpr": s.estimated_fpr,
            "target_fpr": s.target_fpr, "redis_bytes": s.redis_bytes,
        }),
        || {
            format!(
                "{}: {}\nincarnation {:#x}, {} Redis bytes\nfill {:.4}, ~{} items, estimated FPR \
                 {:.5} (target {:.5} at capacity)",
                s.name,
                s.shape,
                s.incarnation,
                s.redis_bytes,
                s.fill_ratio,
                s.estimated_items,
                s.estimated_fpr,
                s.target_fpr
            )
        },
    );
}

fn window_stats(s: &SharedWindowStats, json_mode: bool) {
    let live: Vec<serde_json::Value> = s
        .live
        .iter()
        .map(|g| {
            json!({"index": g.index, "starts_at_ms": g.starts_at_ms,
                   "expires_at_ms": g.expires_at_ms, "fill_ratio": g.filter.fill_ratio,
                   "estimated_items": g.filter.estimated_items,
                   "estimated_fpr": g.filter.estimated_fpr, "redis_bytes": g.filter.redis_bytes})
        })
        .collect();
    report(
        json_mode,
        json!({
            "name": s.name, "window": true, "incarnation": s.incarnation,
            "window_ms": s.span.as_millis() as u64, "generation_ms": s.width.as_millis() as u64,
            "generations": s.generations, "grace_ms": s.grace.as_millis() as u64,
            "now_ms": s.now_ms, "current": s.current, "live": live,
        }),
        || {
            let mut text = format!(
                "{}: window of {:?} in {} generations of {:?} (grace {:?}), incarnation {:#x}\n\
                 current generation {}; {} live generation(s) hold keys",
                s.name,
                s.span,
                s.generations,
                s.width,
                s.grace,
                s.incarnation,
                s.current,
                s.live.len()
            );
            for g in &s.live {
                text.push_str(&format!(
                    "\n  generation {}: expires in {:.1}s, fill {:.4}, ~{} items, estimated \
                     FPR {:.5}",
                    g.index,
                    g.expires_at_ms.saturating_sub(s.now_ms) as f64 / 1000.0,
                    g.filter.fill_ratio,
                    g.filter.estimated_items,
                    g.filter.estimated_fpr
                ));
            }
            text
        },
    );
}

fn push(db: &PathBuf, tree: Option<&str>, target: &Target, json_mode: bool) -> Result<(), String> {
    if !db.join("conf").exists() && !db.join("db").exists() {
        return Err(format!("{}: not a database directory", db.display()));
    }
    let d = bloomsled::Config::new()
        .path(db)
        .open()
        .map_err(|e| format!("{}: {e}", db.display()))?;
    // An existing tree: sled's open_tree would make a missing one and push it, empty.
    let t = crate::open::existing_tree(&d, tree).map_err(|e| e.to_string())?;
    let shared = target.open()?;
    let local = t.filter_image();
    let s = shared.shape();
    // Bits can be ORed into a plain filter of the same shape; counters need every key.
    let same = local.num_blocks() == s.num_blocks
        && local.num_hashes() == s.num_hashes
        && local.seed() == s.seed
        && !s.counting;
    let (how, n) = if same {
        let shards = shared.push(&local).map_err(|e| e.to_string())?;
        ("bits", shards)
    } else {
        let bar = progress(Some(t.len() as u64), "pushing keys");
        let mut batch = Vec::with_capacity(BATCH);
        let mut n = 0u64;
        for kv in t.iter() {
            let (k, _) = kv.map_err(|e| e.to_string())?;
            batch.push(k.to_vec());
            if batch.len() == BATCH {
                shared.insert_many(&batch).map_err(|e| e.to_string())?;
                n += batch.len() as u64;
                bar.inc(batch.len() as u64);
                batch.clear();
            }
        }
        shared.insert_many(&batch).map_err(|e| e.to_string())?;
        n += batch.len() as u64;
        bar.finish_and_clear();
        ("keys", n)
    };
    report(json_mode, json!({"pushed": how, "count": n}), || {
        if how == "bits" {
            format!("pushed the filter's bits ({n} shards written)")
        } else {
            format!("pushed {n} keys one by one (the shapes differ, or the shared filter counts)")
        }
    });
    Ok(())
}

fn write_filter(f: &Filter, file: &PathBuf) -> Result<(), String> {
    let tmp = file.with_extension("tmp");
    fs::write(&tmp, f.to_bytes())
        .and_then(|_| fs::rename(&tmp, file))
        .map_err(|e| format!("{}: {e}", file.display()))
}

fn report(json_mode: bool, value: serde_json::Value, text: impl FnOnce() -> String) {
    if json_mode {
        println!("{value}");
    } else {
        println!("{}", text());
    }
}
