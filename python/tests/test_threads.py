"""Objects shared between threads."""

from __future__ import annotations

import threading

import bloomsled


def run_threads(n, target):
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_threads_share_a_tree(tmp_path):
    with bloomsled.Db(str(tmp_path / "db"), expected_items=100_000) as db:
        tree = db.open_tree("shared")
        winners: list[list[bytes]] = [[] for _ in range(8)]
        keys = [f"https://example.com/{i}".encode() for i in range(4_000)]

        def work(i):
            for k in keys:  # every thread races for every key
                if tree.insert_if_absent(k):
                    winners[i].append(k)
            tree.insert_many([(f"t{i}-{j}", b"x") for j in range(500)])
            assert all(tree.contains_many(keys))

        assert run_threads(8, work) == []
        won = [k for w in winners for k in w]
        assert sorted(won) == sorted(keys), "exactly one thread saw each key as new"
        assert len(tree) == 4_000 + 8 * 500
        assert all(tree.may_contain(k) for k in tree)


def test_threads_share_a_filter():
    f = bloomsled.Filter(100_000)
    new_counts = [0] * 8
    keys = [f"k{i}" for i in range(10_000)]

    def work(i):
        new_counts[i] = sum(f.add_many(keys))
        f.update(f"{i}-{j}" for j in range(1_000))

    assert run_threads(8, work) == []
    assert sum(new_counts) >= 10_000 * 0.99  # each key new once (a collision may hide one)
    assert all(f.contains_many(keys))


def test_close_while_threads_work(tmp_path):
    db = bloomsled.Db(str(tmp_path / "db"))
    started = threading.Barrier(5)

    def work(i):
        started.wait()
        n = 0
        try:
            while True:
                db.insert_many([(f"{i}-{n}-{j}", b"") for j in range(100)])
                db.contains_many([f"{i}-{n}-{j}" for j in range(100)])
                n += 1
        except bloomsled.ClosedError:
            return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait()
    db.close()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()


def test_threads_race_on_sets(tmp_path):
    with bloomsled.Db(str(tmp_path / "db")) as db:
        members = [i.to_bytes(4, "big") for i in range(600)]
        won: list[list[bytes]] = [[] for _ in range(6)]

        def work(i):
            for m in members:  # four sets, six threads racing for every member
                if db.add_to_set(b"bucket-%d" % (m[-1] % 4), m):
                    won[i].append(m)

        assert run_threads(6, work) == []
        flat = sorted(m for w in won for m in w)
        assert flat == members, "each member added exactly once"
        stored = b"".join(db.get(b"bucket-%d" % j) for j in range(4))
        assert sorted(stored[i : i + 4] for i in range(0, len(stored), 4)) == members


CLOSE_UNDER_LOAD = r"""
import os, sys, threading, time
import bloomsled

s = bloomsled.FingerprintSet(sys.argv[1], expected_items=1_000_000, width=20)
fps = [os.urandom(20) for _ in range(200_000)]
s.add_many(fps[:1000])

def batches():  # long calls that leave the interpreter
    try:
        while True:
            s.contains_many(fps)
            s.add_many(fps[:5000])
    except bloomsled.ClosedError:
        pass

def singles():  # short calls that keep it
    try:
        while True:
            fps[0] in s
            s.add(fps[1])
    except bloomsled.ClosedError:
        pass

threads = [threading.Thread(target=f) for f in (batches, singles)]
for t in threads:
    t.start()
time.sleep(0.3)
s.close()
for t in threads:
    t.join()
print("closed")
"""


def test_close_while_batch_and_single_calls_run_on_a_fingerprint_set(tmp_path):
    """close() waits for the calls in progress. A batch call that held the set's lock
    while it waited to re-enter the interpreter, a close() waiting for that lock, and a
    single call holding the interpreter while it waited for the lock behind the close
    deadlocked the process (a waiting writer blocks new readers)."""
    import subprocess
    import sys

    for attempt in range(3):
        try:
            p = subprocess.run(
                [sys.executable, "-c", CLOSE_UNDER_LOAD, str(tmp_path / f"set{attempt}")],
                capture_output=True, text=True, timeout=30,
            )
        except subprocess.TimeoutExpired:
            raise AssertionError("deadlock: the process hung for 30 s") from None
        assert p.returncode == 0 and "closed" in p.stdout, p.stderr[-2000:]
