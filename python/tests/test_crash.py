"""A Python child killed with kill -9 mid-insert: every key sled kept is found again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import bloomsled

CHILD = textwrap.dedent(
    """
    import sys, bloomsled
    db = bloomsled.Db(sys.argv[1], expected_items=200_000)
    t = db.open_tree("t", expected_items=50_000)
    i = 0
    while True:
        batch = [(f"key-{j:08}".encode(), b"v" * (j % 50)) for j in range(i, i + 100)]
        db.insert_many(batch)
        for k, v in batch[:20]:
            t.insert(k, v)
        i += 100
        if i % 5_000 == 0:
            db.flush()
            print(i, flush=True)  # every key below i is durable
    """
)


def test_kill9_mid_insert_no_false_negatives(tmp_path):
    path = str(tmp_path / "db")
    for round_ in range(3):
        p = subprocess.Popen(
            [sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE, text=True
        )
        durable = 0
        deadline = time.time() + 60
        assert p.stdout is not None
        while durable < 20_000 * (round_ + 1) and time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            durable = int(line)
        time.sleep(0.05 * round_)  # mid-batch, at a different point each round
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert durable > 0, "the child made no progress"
        with bloomsled.Db(path) as db:
            report = db.recovery_report()
            t = db.open_tree("t")
            stored = list(db)
            assert len(stored) >= durable
            # No false negatives: every key sled holds passes the filter, and every key
            # flushed before the kill is there.
            assert all(db.may_contain(k) for k in stored)
            assert all(db.contains_many(stored))
            flushed = [f"key-{j:08}".encode() for j in range(durable)]
            assert all(db.contains_many(flushed))
            assert all(t.may_contain(k) for k in t)
            assert report["outcome"] in ("loaded", "replayed", "rebuilt", "created"), report
