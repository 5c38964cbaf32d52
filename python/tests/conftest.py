"""Shared helpers: a generated site on a local HTTP server, a private redis-server."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SPIDER = HERE / "crawl_spider.py"


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    rng = random.Random()
    while True:
        port = rng.randrange(20_000, 55_000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10_000))
            return port
        except OSError:
            continue


class Site:
    """`pages` pages at /p/<i>; page i links to i+1 (so every page is reachable from 0),
    to a few random pages (duplicates across pages, cycles), to itself and to page 0; or,
    with `tree`, to its `tree` children, itself, page 0 and its first child again; and,
    with `variants`, to that many near-duplicate URLs of itself."""

    def __init__(
        self,
        pages: int,
        links: int = 8,
        seed: int = 7,
        delay: float = 0.0,
        broken: int = 0,
        tree: int = 0,
        variants: int = 0,
    ):
        rng = random.Random(seed)
        self.pages = pages
        self.delay = delay
        # Near-duplicate URLs: each page also links to `/p/<i>?v=<k>` for k < variants,
        # distinct pages that link back to the root only.
        self.variants = variants
        self.links = []
        for i in range(pages):
            if tree:
                # A tree: the only link to page i is on its parent, (i - 1) // tree, so a
                # request dropped is a page (and its subtree) never fetched. The links to
                # the page itself, to the root and the first child again are duplicates.
                kids = [c for c in range(tree * i + 1, tree * i + tree + 1) if c < pages]
                out = kids + [i, 0] + kids[:1]
            else:
                out = [(i + 1) % pages, i, 0] + [rng.randrange(pages) for _ in range(links)]
                out += out[:2]  # the same link twice on one page
                if broken and i % broken == 0:
                    out.append(pages + i)  # a link to a missing page: 404
            self.links.append(out)
        self.broken = broken
        self.tree = tree
        self.hits: Counter[str] = Counter()
        self.lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                path, _, query = self.path.partition("?")
                parts = path.split("/")
                if len(parts) != 3 or parts[1] != "p" or not parts[2].isdigit():
                    self.send_error(404)
                    return
                i = int(parts[2])
                variant = query[2:] if query.startswith("v=") else None
                if i >= site.pages:
                    with site.lock:
                        site.hits[self.path] += 1
                if (
                    i >= site.pages
                    or (query and not (variant or "").isdigit())
                    or (variant is not None and int(variant) >= site.variants)
                ):
                    self.send_error(404)
                    return
                with site.lock:
                    site.hits[self.path] += 1
                if site.delay:
                    time.sleep(site.delay)
                # A variant page links back to the root only (a duplicate).
                links = [0] if variant is not None else site.links[i]
                hrefs = [f"/p/{j}" for j in links]
                if variant is None:
                    hrefs += [f"/p/{i}?v={k}" for k in range(site.variants)]
                body = "".join(f'<a href="{h}">{h}</a> ' for h in hrefs)
                data = f"<html><body><h1>{i}</h1>{body}</body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def all_paths(self) -> set[str]:
        pages = {f"/p/{i}" for i in range(self.pages)}
        return pages | {f"/p/{i}?v={k}" for i in range(self.pages) for k in range(self.variants)}

    def parent(self, path: str) -> str | None:
        """On a tree, the one page that links to `path` (None for the root)."""
        assert self.tree, "only a tree has one parent per page"
        i = int(path.rsplit("/", 1)[1])
        return f"/p/{(i - 1) // self.tree}" if i else None

    def broken_paths(self) -> set[str]:
        """The missing pages that pages link to (404)."""
        return {f"/p/{self.pages + i}" for i in range(0, self.pages, self.broken or self.pages + 1)}

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.hits)

    def reset(self) -> None:
        with self.lock:
            self.hits.clear()

    def fetched(self) -> int:
        with self.lock:
            return len(self.hits)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site():
    s = Site(2000)
    yield s
    s.close()


def crawl_cmd(site_url: str, start: str = "/p/0", **settings) -> list[str]:
    cmd = [sys.executable, str(SPIDER), site_url + start]
    for k, v in settings.items():
        cmd.append(f"{k}={v}")
    return cmd


def run_crawl(site_url: str, log: Path, timeout: float = 240, **settings) -> str:
    with open(log, "wb") as out:
        p = subprocess.run(
            crawl_cmd(site_url, **settings), stdout=out, stderr=subprocess.STDOUT, timeout=timeout
        )
    text = log.read_text(errors="replace")
    assert p.returncode == 0, text[-3000:]
    return text


class Redis:
    """A private redis-server on a free loopback port. `persist` turns on both kinds of
    persistence (an RDB save at shutdown, an AOF fsynced at every write) in `dir`, so a
    server stopped either way comes back with its data."""

    def __init__(
        self,
        exe: str,
        persist: bool = False,
        dir: Path | None = None,
        extra: list[str] | None = None,
        port: int | None = None,
    ):
        self.exe = exe
        self.extra = extra or []
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None
        self.persist = persist
        self.dir = dir
        self.start()

    def args(self) -> list[str]:
        if not self.persist:
            return ["--save", "", "--appendonly", "no"]
        assert self.dir is not None
        return ["--dir", str(self.dir), "--save", "3600 1", "--appendonly", "yes",
                "--appendfsync", "always"]

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", *self.args(), *self.extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        """kill -9 (with `persist`, every acknowledged write is in the AOF)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def shutdown(self) -> None:
        """SIGTERM: a clean shutdown, which saves the RDB and syncs the AOF."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.proc = None

    def restart_empty(self) -> None:
        self.stop()
        self.start()


def redis_exe() -> str:
    exe = shutil.which("redis-server")
    if exe is None:
        if in_ci():
            pytest.fail("redis-server is not installed and CI=true: Redis tests must run")
        pytest.skip("redis-server not installed")
    return exe


@pytest.fixture
def redis_server():
    r = Redis(redis_exe())
    yield r
    r.stop()


@pytest.fixture
def persistent_redis(tmp_path):
    """A redis-server that keeps its data across a stop (RDB and AOF)."""
    d = tmp_path / "redis"
    d.mkdir()
    r = Redis(redis_exe(), persist=True, dir=d)
    yield r
    r.stop()


class RedisCluster:
    """A Redis Cluster on loopback: `masters` masters with `replicas` replicas each, real
    redis-server processes without persistence, and a short `cluster-node-timeout`, so
    that a master killed is failed over by its own replica within a few seconds."""

    def __init__(
        self, exe: str, dir: Path, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000
    ):
        self.nodes: list[Redis] = []
        try:
            for i in range(masters * (1 + replicas)):
                d = dir / f"node{i}"  # each node's nodes.conf
                d.mkdir(parents=True)
                args = ["--dir", str(d), "--cluster-enabled", "yes", "--cluster-config-file",
                        "nodes.conf", "--cluster-node-timeout", str(node_timeout_ms)]
                self.nodes.append(Redis(exe, extra=args, port=free_cluster_port()))
            addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
            out = subprocess.run(
                ["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas",
                 str(replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=60,
            )
            assert out.returncode == 0, out.stdout + out.stderr
            self.wait_ok(expect_replicas=masters * replicas)
        except BaseException:
            self.stop()  # no server outlives a cluster that failed to form
            raise

    def cli(self, node: Redis, *args: str) -> str:
        out = subprocess.run(
            ["redis-cli", "-p", str(node.port), *args], capture_output=True, text=True, timeout=10
        )
        return out.stdout

    def alive(self) -> list[Redis]:
        return [n for n in self.nodes if n.proc is not None]

    def topology(self) -> dict[str, dict]:
        """Node id -> {port, role, master (its master's id), slots, failed}, as seen by
        a live node."""
        out: dict[str, dict] = {}
        for line in self.cli(self.alive()[0], "cluster", "nodes").splitlines():
            f = line.split()
            if len(f) < 8:
                continue
            out[f[0]] = {
                "port": int(f[1].split("@")[0].rsplit(":", 1)[1]),
                "role": "master" if "master" in f[2] else "replica",
                "master": None if f[3] == "-" else f[3],
                "slots": f[8:],
                "failed": "fail" in f[2].split(","),
            }
        return out

    def node_at(self, port: int) -> Redis:
        return next(n for n in self.nodes if n.port == port)

    def master_of_slot(self, slot: int) -> Redis:
        for node in self.topology().values():
            if node["role"] != "master" or node["failed"]:
                continue
            for r in node["slots"]:
                a, _, b = r.partition("-")
                if a.isdigit() and int(a) <= slot <= int(b or a):
                    return self.node_at(node["port"])
        raise AssertionError(f"no master serves slot {slot}")

    def replica_of(self, master: Redis) -> Redis:
        topo = self.topology()
        mid = next(i for i, n in topo.items() if n["port"] == master.port)
        return self.node_at(next(n["port"] for n in topo.values() if n["master"] == mid))

    def wait_ok(self, expect_replicas: int = 0, timeout: float = 60) -> None:
        """Until every live node says `cluster_state:ok` and every replica's link to its
        master is up (the replica holds the master's data)."""
        deadline = time.time() + timeout
        while True:
            ok = all("cluster_state:ok" in self.cli(n, "cluster", "info") for n in self.alive())
            links = [self.cli(n, "info", "replication") for n in self.alive()]
            up = sum("master_link_status:up" in i for i in links)
            if ok and up >= expect_replicas:
                return
            assert time.time() < deadline, "the cluster did not converge"
            time.sleep(0.1)

    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


@pytest.fixture
def redis_cluster(tmp_path):
    c = RedisCluster(redis_exe(), tmp_path / "cluster")
    yield c
    c.stop()


def resp_command(port: int, *args: str | bytes) -> object:
    """One command to the redis-server on `port`, its reply parsed (RESP2: bytes, int,
    list, None; an error reply raises). Enough for the tests to read binary values
    without a client library."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(out)
        f = s.makefile("rb")

        def read() -> object:
            line = f.readline()
            kind, rest = line[:1], line[1:-2]
            if kind == b"+":
                return rest
            if kind == b"-":
                raise RuntimeError(rest.decode())
            if kind == b":":
                return int(rest)
            if kind == b"$":
                n = int(rest)
                return None if n < 0 else f.read(n + 2)[:-2]
            if kind == b"*":
                n = int(rest)
                return None if n < 0 else [read() for _ in range(n)]
            raise RuntimeError(f"unexpected reply {line!r}")

        return read()
