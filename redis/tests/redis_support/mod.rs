//! Real Redis servers for the tests: each test starts its own `redis-server` processes on
//! free loopback ports in temporary directories and kills them (by PID) when dropped.
//!
//! Without `redis-server` on PATH the tests fail with a message saying how to install it,
//! unless `BLOOMSLED_SKIP_REDIS=1` is set outside CI (under `CI=true` they always fail).
#![allow(dead_code)]

pub mod relay;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// True if the Redis tests should run; panics (fails the test) if they cannot and the user
/// did not opt out, or if running under CI.
pub fn redis_available() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if found {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let opt_out = std::env::var("BLOOMSLED_SKIP_REDIS").is_ok_and(|v| v == "1");
    if opt_out && !ci {
        eprintln!(
            "\n*** SKIPPING a Redis test: redis-server is not on PATH and BLOOMSLED_SKIP_REDIS=1 \
             ***\n"
        );
        return false;
    }
    panic!(
        "redis-server is not on PATH: install it (Debian/Ubuntu: `apt-get install redis-server \
         redis-tools`), or set BLOOMSLED_SKIP_REDIS=1 to skip the Redis tests (not under CI)"
    );
}

/// Skips the calling test (returns) when Redis is unavailable and the user opted out.
#[macro_export]
macro_rules! require_redis {
    () => {
        if !redis_support::redis_available() {
            return;
        }
    };
}

/// A free loopback port (bound, read, released; the server binds it right after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// One `redis-server` process.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    /// A server without persistence (`--save '' --appendonly no`).
    pub fn start() -> Server {
        Self::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// A server whose every acknowledged write survives `kill -9` (AOF, `appendfsync
    /// always`): started again with [`Server::start_again`], it has its data.
    pub fn start_persistent() -> Server {
        Self::start_with(&[
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ])
    }

    /// A server without persistence, 8 MiB of memory at most, that evicts keys at random
    /// when it is full (`--maxmemory-policy allkeys-random`): for tests of lost data.
    pub fn start_evicting() -> Server {
        Self::start_with(&[
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory",
            "8mb",
            "--maxmemory-policy",
            "allkeys-random",
        ])
    }

    /// A server with these extra arguments, in a fresh temporary directory.
    pub fn start_with(args: &[&str]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_owned();
        let mut s = Server {
            port: 0,
            dir,
            child: None,
            extra: args.iter().map(|a| a.to_string()).collect(),
            _tmp: Some(tmp),
        };
        for attempt in 0.. {
            s.port = free_port();
            if s.spawn() {
                break;
            }
            assert!(attempt < 5, "redis-server would not start; see {:?}", s.dir);
        }
        s
    }

    fn spawn(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.join("redis.log")).expect("log file");
        let child = Command::new("redis-server")
            .arg("--port")
            .arg(self.port.to_string())
            .args([
                "--bind",
                "127.0.0.1",
                "--daemonize",
                "no",
                "--protected-mode",
                "no",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if self.ping() {
                return true;
            }
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return false; // exited: the port was probably taken
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A plain connection for inspecting or damaging the data behind bloomsled's back.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn ping(&self) -> bool {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// `kill -9`, no shutdown save.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port and directory.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not restart on {}",
            self.port
        );
    }

    /// A Redis that blinks: `times` rounds of `gap`, `kill -9`, `gap`, restart with its data.
    pub fn blink(&mut self, times: usize, gap: std::time::Duration) {
        for _ in 0..times {
            std::thread::sleep(gap);
            self.kill();
            std::thread::sleep(gap);
            self.start_again();
        }
    }

    /// Starts the server again on the same port and directory after [`Server::kill`] (with
    /// persistence on, it reloads its data).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the server is still running");
        assert!(
            self.spawn(),
            "redis-server did not start again on {}",
            self.port
        );
    }

    /// Runs `redis-cli` against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (Debian: apt-get install redis-tools)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The server's version (`redis_version` of `INFO server`), "?" if unknown.
    pub fn version(&self) -> String {
        self.cli(&["info", "server"])
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_owned()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster of `masters` masters, no replicas, on loopback.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

/// A slot on its way from one master to another ([`Cluster::begin_migration`]).
pub struct Migration {
    /// The slot.
    pub slot: u16,
    /// The target master's index in `Cluster::nodes`, and its node id.
    pub to: usize,
    to_id: String,
}

/// The arguments of a cluster node without persistence.
const CLUSTER_NODE: &[&str] = &[
    "--save",
    "",
    "--appendonly",
    "no",
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "2000",
];

impl Cluster {
    /// A cluster every node of which reports `cluster_state:ok`.
    pub fn start(masters: usize) -> Cluster {
        let c = Self::start_unsettled(masters);
        c.wait_ok();
        c
    }

    /// A cluster straight after `redis-cli --cluster create` returns, before its nodes agree
    /// that it is up: commands may still meet `CLUSTERDOWN`.
    pub fn start_unsettled(masters: usize) -> Cluster {
        let nodes: Vec<Server> = (0..masters)
            .map(|_| Server::start_with(CLUSTER_NODE))
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| n.addr()).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli (Debian: apt-get install redis-tools)");
        assert!(
            out.status.success(),
            "cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Cluster { nodes }
    }

    /// Waits until every node reports `cluster_state:ok` and agrees on the slots.
    pub fn wait_ok(&self) {
        let start = Instant::now();
        loop {
            let ok = self
                .nodes
                .iter()
                .all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok"));
            if ok {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "cluster did not converge"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// A new node that joins as a replica of master `i` but never receives its data: the
    /// master is told to wait an hour before its (diskless) full sync. The replica is
    /// pushed as the last of `nodes`.
    pub fn add_empty_replica(&mut self, i: usize) -> usize {
        for (k, v) in [
            ("repl-diskless-sync", "yes"),
            ("repl-diskless-sync-delay", "3600"),
        ] {
            self.nodes[i].cli(&["config", "set", k, v]);
        }
        let r = Server::start_with(CLUSTER_NODE);
        // Every node is told to meet the new one: nodes ignore pings from nodes they do
        // not know, so gossip alone may not reach them before master `i` is gone.
        for n in &self.nodes {
            n.cli(&["cluster", "meet", "127.0.0.1", &r.port.to_string()]);
        }
        let id = self.node_id(i);
        let rid = r.cli(&["cluster", "myid"]).trim().to_owned();
        let start = Instant::now();
        loop {
            // REPLICATE needs the new node to know the master and its slots first.
            let known = self
                .nodes
                .iter()
                .all(|n| n.cli(&["cluster", "nodes"]).contains(&rid))
                && r.cli(&["cluster", "info"]).contains("cluster_state:ok");
            if known && r.cli(&["cluster", "replicate", &id]).trim() == "OK" {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the new node never joined next to master {i}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // Every node (the new one included) must list it as the master's replica.
        let as_replica = format!("slave {id}");
        let start = Instant::now();
        while !self.nodes.iter().chain([&r]).all(|n| {
            n.cli(&["cluster", "nodes"])
                .lines()
                .any(|l| l.starts_with(&rid) && l.contains(&as_replica))
        }) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the cluster never listed the new node as a replica of master {i}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.nodes.push(r);
        self.nodes.len() - 1
    }

    /// The node id (40 hex digits) of node `i`.
    pub fn node_id(&self, i: usize) -> String {
        self.nodes[i].cli(&["cluster", "myid"]).trim().to_owned()
    }

    /// Starts moving the slot of `shard` (a key the cluster holds) from its master to the
    /// next one: `CLUSTER SETSLOT … IMPORTING` on the target, `MIGRATING` on the source,
    /// then `MIGRATE` of the key. Until [`Cluster::finish_migration`], a request for the
    /// slot gets `ASK` from the source.
    pub fn begin_migration(&self, shard: &str) -> Migration {
        let slot: u16 = self.nodes[0]
            .cli(&["cluster", "keyslot", shard])
            .trim()
            .parse()
            .unwrap();
        let from = self.owner_of(slot);
        let to = (from + 1) % self.nodes.len();
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let slot_s = slot.to_string();
        let importing = self.nodes[to].cli(&["cluster", "setslot", &slot_s, "importing", &from_id]);
        assert_eq!(importing.trim(), "OK", "SETSLOT IMPORTING: {importing}");
        let migrating = self.nodes[from].cli(&["cluster", "setslot", &slot_s, "migrating", &to_id]);
        assert_eq!(migrating.trim(), "OK", "SETSLOT MIGRATING: {migrating}");
        let port = self.nodes[to].port.to_string();
        let out = self.nodes[from].cli(&[
            "migrate",
            "127.0.0.1",
            &port,
            "",
            "0",
            "5000",
            "keys",
            shard,
        ]);
        assert_eq!(out.trim(), "OK", "MIGRATE: {out}");
        Migration { slot, to, to_id }
    }

    /// Hands the slot of `m` over to its target on every node and waits for the cluster to
    /// agree: the old route now answers `MOVED`.
    pub fn finish_migration(&self, m: &Migration) {
        let slot = m.slot.to_string();
        for n in &self.nodes {
            n.cli(&["cluster", "setslot", &slot, "node", &m.to_id]);
        }
        self.wait_ok();
        assert_eq!(self.owner_of(m.slot), m.to);
    }

    /// Which node (index) serves `slot` as master.
    pub fn owner_of(&self, slot: u16) -> usize {
        let id = self.nodes[0]
            .cli(&["cluster", "nodes"])
            .lines()
            .find(|l| {
                l.contains("master")
                    && l.split_whitespace().skip(8).any(|r| {
                        let mut it = r.split('-');
                        match (it.next().and_then(|a| a.parse::<u16>().ok()), it.next()) {
                            (Some(a), Some(b)) => {
                                b.parse::<u16>().is_ok_and(|b| (a..=b).contains(&slot))
                            }
                            (Some(a), None) => a == slot,
                            _ => false,
                        }
                    })
            })
            .and_then(|l| l.split_whitespace().next().map(str::to_owned))
            .expect("slot owner");
        (0..self.nodes.len())
            .find(|&i| self.node_id(i) == id)
            .expect("node")
    }
}

/// A Redis Cluster whose every master is reached through a loopback [`relay::Relay`] that
/// can lose one reply: each node announces its relay's port (`cluster-announce-port`), so
/// the slot map a client reads (`CLUSTER SLOTS`), its redirections (`MOVED`, `ASK`) and
/// its reconnections all lead through the relays, while the nodes' bus stays direct.
pub struct RelayedCluster {
    pub cluster: Cluster,
    pub relays: Vec<relay::Relay>,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl RelayedCluster {
    pub fn start(masters: usize) -> RelayedCluster {
        let cluster = Cluster::start(masters);
        let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let relays: Vec<relay::Relay> = cluster
            .nodes
            .iter()
            .map(|n| relay::Relay::start_to(n.addr(), armed.clone(), relay::Cut::FlatArray))
            .collect();
        for (n, r) in cluster.nodes.iter().zip(&relays) {
            assert_eq!(
                n.cli(&["config", "set", "cluster-announce-ip", "127.0.0.1"])
                    .trim(),
                "OK"
            );
            let port = r.port().to_string();
            let set = n.cli(&["config", "set", "cluster-announce-port", &port]);
            assert_eq!(set.trim(), "OK", "cluster-announce-port: {set}");
        }
        // Every node must list every other at its relay's port before a client reads the
        // slot map from any of them.
        let wanted: Vec<String> = cluster
            .nodes
            .iter()
            .zip(&relays)
            .map(|(n, r)| format!("127.0.0.1:{}@{}", r.port(), n.port + 10000))
            .collect();
        let start = Instant::now();
        while !cluster.nodes.iter().all(|n| {
            let nodes = n.cli(&["cluster", "nodes"]);
            let slots = n.cli(&["cluster", "slots"]);
            wanted.iter().all(|w| nodes.contains(w.as_str()))
                && relays
                    .iter()
                    .all(|r| slots.lines().any(|l| l.trim() == r.port().to_string()))
        }) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the nodes never announced their relays' ports"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster.wait_ok();
        RelayedCluster {
            cluster,
            relays,
            armed,
        }
    }

    /// The relays' URLs: what a client is given.
    pub fn urls(&self) -> Vec<String> {
        self.relays.iter().map(|r| r.url()).collect()
    }

    /// The next array reply (a `BITFIELD`'s) through any relay is lost, and
    /// its connection cut: the command ran in Redis, its client never hears back.
    pub fn lose_next_reply(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// True while a loss is armed and no reply has been cut yet.
    pub fn armed(&self) -> bool {
        self.armed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The ring entries (`g:<e>` fields) of the window's record.
pub fn window_ring(
    s: &Server,
    w: &bloomsled_redis::SharedWindow,
) -> std::collections::HashMap<u64, String> {
    let all: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(w.record_key())
        .query(&mut s.client())
        .unwrap();
    all.into_iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("g:")?.parse().ok()?, v)))
        .collect()
}
