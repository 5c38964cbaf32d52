//! `bloomsled`: inspect, load, check, verify and repair bloomsled databases, and run the demo.
//!
//! One module per command; [`open`] finds and opens databases, [`output`] prints text or
//! JSON rows, [`error`] is the one error type.

mod check;
mod demo;
mod error;
mod load;
mod open;
mod output;
mod rebuild;
#[cfg(feature = "redis")]
mod redis;
mod snapshot;
mod stats;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::error::CliResult;

/// A Bloom filter in front of sled: absent keys never touch the store.
#[derive(Parser)]
#[command(name = "bloomsled", version, about)]
struct Cli {
    /// Print machine-readable JSON instead of text (for commands that report).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a demo database, compare lookups with plain sled, then reopen it.
    Demo {
        /// Folder for the demo: a new or empty folder, or one an earlier demo made (which is
        /// replaced). Any other folder is refused and left untouched.
        #[arg(long, default_value = "./bloomsled-demo")]
        dir: PathBuf,
        /// Number of URL-like keys to load.
        #[arg(long, default_value_t = 1_000_000)]
        items: u64,
    },
    /// Load keys, one per line (`key` or `key<TAB>value`), from FILE or `-` (stdin).
    Load {
        /// Database directory (created if missing).
        db: PathBuf,
        /// Tree to load into (default: the default tree).
        #[arg(long)]
        tree: Option<String>,
        /// Input file, or `-` for standard input.
        #[arg(default_value = "-")]
        file: String,
    },
    /// For each key, print `absent` (the filter said no), `present`, or `false-positive`.
    Check {
        /// Database directory.
        db: PathBuf,
        /// Tree to look in.
        #[arg(long)]
        tree: Option<String>,
        /// Keys to check, or `-` to read them from standard input.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Filter statistics and how each tree's filter was restored.
    Stats {
        /// Database directory.
        db: PathBuf,
        /// Do not wait for filters being rebuilt after a crash: show how far each rebuild
        /// has come (keys scanned, rate, time left) instead.
        #[arg(long)]
        no_wait: bool,
        /// Print every tree's and window's metrics in the Prometheus text exposition format
        /// (the series of the library's `metrics` feature; counters are this process's,
        /// so 0, and the gauges describe the filters as they are).
        #[arg(long)]
        prometheus: bool,
    },
    /// Check every snapshot CRC and every stored key against its filter; exit 1 on a problem.
    Verify {
        /// Database directory.
        db: PathBuf,
    },
    /// Rebuild every tree's filter from its keys, keeping its mode and size.
    Rebuild {
        /// Database directory.
        db: PathBuf,
        /// Convert every tree to this filter mode (by default each tree keeps its own).
        #[arg(long, value_enum)]
        mode: Option<ModeArg>,
    },
    /// Write a fresh snapshot of every tree's filter.
    Snapshot {
        /// Database directory.
        db: PathBuf,
    },
    /// A filter shared through Redis or Redis Cluster (create, add, check, info, push, pull).
    #[cfg(feature = "redis")]
    #[command(subcommand)]
    Redis(redis::RedisCommand),
}

/// A filter mode on the command line.
#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    /// Bits only.
    Plain,
    /// Counting filters (removes clear bits).
    Counting,
}

impl From<ModeArg> for bloomsled::FilterMode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Plain => bloomsled::FilterMode::Plain,
            ModeArg::Counting => bloomsled::FilterMode::Counting,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bloomsled: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> CliResult<ExitCode> {
    let json = cli.json;
    match &cli.command {
        Command::Demo { dir, items } => demo::run(dir, *items, json),
        Command::Load { db, tree, file } => load::run(db, tree.as_deref(), file, json),
        Command::Check { db, tree, keys } => check::run(db, tree.as_deref(), keys, json),
        Command::Stats {
            prometheus: true, ..
        } if json => {
            use clap::CommandFactory;
            Cli::command()
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    "--prometheus and --json are two output formats: pass one",
                )
                .exit()
        }
        Command::Stats {
            db,
            no_wait,
            prometheus: true,
        } => stats::prometheus(db, !no_wait),
        Command::Stats { db, no_wait, .. } => stats::run(db, !no_wait, json),
        Command::Verify { db } => verify::run(db, json),
        Command::Rebuild { db, mode } => rebuild::run(db, mode.map(Into::into), json),
        Command::Snapshot { db } => snapshot::run(db, json),
        #[cfg(feature = "redis")]
        Command::Redis(cmd) => redis::run(cmd, json).map_err(error::CliError::Redis),
    }
}
