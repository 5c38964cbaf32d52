"""bloomsled.FingerprintSet: round trips, reopen, errors, threads, and kill -9 mid-add."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import bloomsled


def fp(i: int) -> bytes:
    return hashlib.sha1(str(i).encode()).digest()


def test_round_trip_and_reopen(tmp_path):
    path = str(tmp_path / "set")
    with bloomsled.FingerprintSet(path, expected_items=10_000, memtable_items=100) as s:
        assert s.add(fp(0)) is True
        assert s.add(fp(0)) is False
        assert fp(0) in s and fp(1) not in s
        assert s.add_many([fp(i) for i in range(1, 1_000)] + [fp(5)]) == [True] * 999 + [False]
        assert s.contains_many([fp(3), fp(2_000)]) == [True, False]
        assert len(s) == 1_000
        st = s.stats()
        assert st["members"] == 1_000 and st["runs"] >= 1 and st["flushes"] >= 9
        s.sync()
    assert s.closed
    with pytest.raises(bloomsled.ClosedError):
        fp(0) in s
    # Clean close: the saved filter is loaded, and the sizing is the stored one.
    with bloomsled.FingerprintSet(path) as s:
        assert s.stats()["filter_rebuilt"] is False
        assert s.stats()["expected_items"] == 10_000
        assert all(s.contains_many([fp(i) for i in range(1_000)]))
        assert not any(s.contains_many([fp(i) for i in range(1_000, 3_000)]))
        assert sorted(s.members()) == sorted(fp(i) for i in range(1_000))
    s.close()  # closing twice is allowed


def test_errors_are_typed(tmp_path):
    path = str(tmp_path / "set")
    with pytest.raises(bloomsled.InvalidConfig):
        bloomsled.FingerprintSet(path, expected_items=0)
    with pytest.raises(bloomsled.InvalidConfig):
        bloomsled.FingerprintSet(path, expected_items=10, fpr=1.5)
    s = bloomsled.FingerprintSet(path, expected_items=100)
    with pytest.raises(bloomsled.InvalidConfig):
        s.add(b"short")
    with pytest.raises(bloomsled.InvalidConfig):
        s.add_many([fp(1), b"short"])
    assert len(s) == 0, "a rejected batch stored part of itself"
    with pytest.raises(TypeError):
        s.add(12)
    with pytest.raises(bloomsled.InUseError):
        bloomsled.FingerprintSet(path, expected_items=100)
    s.close()
    with open(os.path.join(path, "MANIFEST"), "wb") as f:
        f.write(b"not a manifest at all, but long enough to be read as one........")
    with pytest.raises(bloomsled.CorruptError, match="MANIFEST"):
        bloomsled.FingerprintSet(path, expected_items=100)


def test_threads_share_a_set(tmp_path):
    s = bloomsled.FingerprintSet(str(tmp_path / "set"), expected_items=50_000, memtable_items=500)
    new: list[int] = []

    def work(t: int) -> None:
        # Every thread adds the same fingerprints: each is new to exactly one of them.
        flags = s.add_many([fp(i) for i in range(5_000)])
        new.append(sum(flags))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(new) == 5_000
    assert len(s) == 5_000
    s.close()


CHILD = textwrap.dedent(
    """
    import hashlib, sys, bloomsled
    s = bloomsled.FingerprintSet(sys.argv[1], expected_items=400_000, memtable_items=2_000)
    i = len(s)
    while True:
        s.add_many([hashlib.sha1(str(j).encode()).digest() for j in range(i, i + 100)])
        i += 100
        if i % 5_000 == 0:
            s.sync()
            print(i, flush=True)  # every fingerprint below i is durable
    """
)


def test_kill9_mid_add_no_synced_fingerprint_lost(tmp_path):
    path = str(tmp_path / "set")
    for round_ in range(3):
        p = subprocess.Popen([sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE, text=True)
        durable = 0
        deadline = time.time() + 60
        assert p.stdout is not None
        while durable < 40_000 * (round_ + 1) and time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            durable = int(line)
        time.sleep(0.02 * round_)  # mid-batch, at a different point each round
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert durable > 0, "the child made no progress"
        with bloomsled.FingerprintSet(path) as s:
            assert s.stats()["filter_rebuilt"] is True
            n = len(s)
            assert n >= durable
            # 0 false negatives: every synced fingerprint is there; and nothing else than
            # what the child added (a prefix of its sequence), no duplicate.
            assert all(s.contains_many([fp(i) for i in range(durable)]))
            members = s.members()
            assert len(members) == len(set(members)) == n
            assert set(members) == {fp(i) for i in range(n)}
