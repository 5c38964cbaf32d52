"""A compaction of BloomDupeFilter's pending log that runs in a thread of its own while
requests are appended (``bloomsled._journal.Compaction``): the records appended meanwhile
survive the swap, a failed or abandoned compaction leaves the old log whole, and a
``kill -9`` at any moment of it loses no record the process had written."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bloomsled import FingerprintSet
from bloomsled._journal import ADD, DONE, PendingLog

WIDTH = 20


def fp(i: int) -> bytes:
    return hashlib.sha1(b"req-%d" % i).digest()


def pending_of(log: PendingLog) -> dict[bytes, bytes]:
    """The pending requests a reopened filter would re-schedule: A records with no D after."""
    pending: dict[bytes, bytes] = {}
    for kind, f, payload in log.records():
        if kind == ADD:
            pending[f] = payload
        else:
            pending.pop(f, None)
    return pending


class Model:
    """The log's meaning as appended: the pending requests and the done ones."""

    def __init__(self) -> None:
        self.pending: dict[bytes, bytes] = {}
        self.done: set[bytes] = set()

    def add(self, log: PendingLog, seen: FingerprintSet, i: int) -> None:
        payload = b"request %d" % i
        log.append_add(fp(i), payload)
        seen.add(fp(i))
        self.pending[fp(i)] = payload

    def finish(self, log: PendingLog, i: int) -> None:
        log.append_done(fp(i))
        self.pending.pop(fp(i), None)
        self.done.add(fp(i))


def fill(log: PendingLog, seen: FingerprintSet, model: Model, lo: int, hi: int) -> None:
    for i in range(lo, hi):
        model.add(log, seen, i)
    for i in range(lo, hi):
        if i % 4:
            model.finish(log, i)


def opened(folder: Path, n: int) -> tuple[PendingLog, FingerprintSet, Model]:
    """A log and its seen set in ``folder``, holding requests ``0..n`` (3 in 4 done)."""
    log = PendingLog(folder, WIDTH)
    seen = FingerprintSet(str(folder / "seen"), expected_items=10 * n, width=WIDTH)
    model = Model()
    fill(log, seen, model, 0, n)
    return log, seen, model


def test_records_appended_while_it_runs_survive_the_swap(tmp_path):
    log, seen, model = opened(tmp_path, 4_000)
    before = log.size()
    job = log.begin_compaction(seen)
    # Appended after the compaction's end: new requests, and the done records of requests
    # the compaction keeps as pending (their A records are in the part it rewrites).
    fill(log, seen, model, 4_000, 4_500)
    for i in range(0, 400, 4):
        model.finish(log, i)
    job.run()
    for i in range(4_500, 4_600):  # and more after the long part, before the swap
        model.add(log, seen, i)
    assert job.install() == 1_000
    assert pending_of(log) == model.pending
    assert log.size() < before
    # The compacted part's done fingerprints moved to done.fps; the later ones stay D records.
    moved = {f for chunk in log.done_fingerprints() for f in chunk}
    assert moved == {fp(i) for i in range(4_000) if i % 4}
    assert not (tmp_path / "compaction.tmp").exists()
    assert not (tmp_path / "pending.log.tmp").exists()
    # The counters follow: a second compaction, all at once, keeps the same meaning.
    model.finish(log, 4_500)
    log.compact(seen, add_to_seen=False)
    assert pending_of(log) == model.pending
    assert all(kind == ADD for kind, _, _ in log.records())
    # Appends go to the new file.
    model.add(log, seen, 10_000)
    log.close()
    assert pending_of(PendingLog(tmp_path, WIDTH)) == model.pending
    seen.close()


def test_a_thread_compacts_while_another_appends(tmp_path):
    log, seen, model = opened(tmp_path, 20_000)
    job = log.begin_compaction(seen)
    worker = threading.Thread(target=job.run)
    worker.start()
    rng = random.Random(5)
    i = 20_000
    appended_during = 0
    while worker.is_alive():
        model.add(log, seen, i)
        if rng.random() < 0.5:
            model.finish(log, rng.choice([i, i - 7, rng.randrange(i)]))
        i += 1
        appended_during += 1
    worker.join()
    assert job.error is None
    job.install()
    assert appended_during > 0
    assert pending_of(log) == model.pending
    log.close()
    assert pending_of(PendingLog(tmp_path, WIDTH)) == model.pending
    seen.close()


def test_an_abandoned_or_failed_compaction_leaves_the_old_log_whole(tmp_path):
    log, seen, model = opened(tmp_path, 2_000)
    old = log.path.read_bytes()
    done_before = log.done_path.read_bytes()
    job = log.begin_compaction(seen)
    job.run()
    job.abort()  # what close() does with a compaction still running
    assert log.path.read_bytes() == old
    assert log.done_path.read_bytes() == done_before
    assert not (tmp_path / "pending.log.tmp").exists()
    # A failure inside the long part (here: its temporary folder is in the way) is kept
    # for the caller, and abort() restores the same state.
    job = log.begin_compaction(seen)
    (tmp_path / "compaction.tmp").write_bytes(b"in the way")
    with pytest.raises(OSError):
        job.run()
    assert isinstance(job.error, OSError)
    (tmp_path / "compaction.tmp").unlink()
    job.abort()
    assert log.path.read_bytes() == old and log.done_path.read_bytes() == done_before
    model.add(log, seen, 99_999)
    assert pending_of(log) == model.pending
    seen.close()
    log.close()


CHILD = r"""
import hashlib, sys, threading
from pathlib import Path
from bloomsled import FingerprintSet
from bloomsled._journal import PendingLog

folder, seed = Path(sys.argv[1]), int(sys.argv[2])
def fp(i): return hashlib.sha1(b"req-%d" % i).digest()
log = PendingLog(folder, 20)
seen = FingerprintSet(str(folder / "seen"), expected_items=200_000, width=20)
out = sys.stdout
i = 0
def add(i):
    log.append_add(fp(i), b"request %d" % i); seen.add(fp(i)); out.write("A %d\n" % i)
def done(i):
    log.append_done(fp(i)); out.write("D %d\n" % i)
for i in range(30_000):
    add(i)
for i in range(30_000):
    if i % 3:
        done(i)
out.flush()
i = 30_000
while True:  # compactions one after another, each beside appends, until killed
    job = log.begin_compaction(seen)
    out.write("C\n"); out.flush()
    t = threading.Thread(target=job.run); t.start()
    while t.is_alive():
        add(i)
        if i % 2:
            done(i - 1)
        out.flush()
        i += 1
    t.join()
    job.install()
    out.write("I\n"); out.flush()
"""


@pytest.mark.parametrize("seed", range(6))
def test_kill9_during_a_background_compaction_loses_nothing(tmp_path, seed):
    """A real child compacting beside its appends, killed at a random moment (inside the
    long part, the tail copy, the rename): every record it had written is there."""
    rng = random.Random(seed)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    lines: list[str] = []
    compactions = 0
    target = rng.randint(1, 3)
    # Killed after `target` compactions started plus a random delay.
    deadline = time.monotonic() + 120
    while compactions < target and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line == "C\n":
            compactions += 1
    time.sleep(rng.uniform(0, 0.5))
    os.kill(child.pid, signal.SIGKILL)
    # Read the rest through the same text stream readline() used: communicate() reads the
    # pipe's descriptor and skips what readline() had already buffered, so lines the child
    # wrote (a "D n" among them) went missing and a done request read as lost.
    rest = child.stdout.read()
    assert child.stderr is not None
    err = child.stderr.read()
    child.wait()
    assert compactions == target, f"the child did not get there: {err}"
    lines.extend(rest.splitlines(keepends=True))
    acked_add: set[int] = set()
    acked_done: set[int] = set()
    for line in lines:
        if not line.endswith("\n"):
            continue  # cut by the kill: the append may or may not have happened
        if line.startswith("A "):
            acked_add.add(int(line[2:]))
        elif line.startswith("D "):
            acked_done.add(int(line[2:]))
    # The one done record the kill may have cut off after it reached the log, before the
    # child said so: the next one after the newest acknowledged add n, which is n - 1 for n
    # odd (same round) and n for n even (the next round); an unacknowledged add changes no
    # acknowledged request.
    newest = max(acked_add)
    in_flight_done = newest - 1 if newest % 2 else newest
    log = PendingLog(tmp_path, WIDTH)
    pending = pending_of(log)
    kinds = {(kind, f) for kind, f, _ in log.records()}
    for i in acked_add - acked_done:
        if i == in_flight_done and (DONE, fp(i)) in kinds:
            # Its done record was written, its acknowledgement was not; its add is there.
            assert (ADD, fp(i)) in kinds, f"request {i}: a done record without its add"
            continue
        assert pending.get(fp(i)) == b"request %d" % i, f"pending request {i} lost"
    for i in acked_done:
        assert fp(i) not in pending, f"request {i} was done, and is pending again"
    assert len(acked_add) >= 30_000


def test_a_torn_tail_is_left_out_of_the_rewrite_at_open_and_reported(tmp_path):
    """After a crash the open compacts with ``add_to_seen`` in one pass over the log: a
    torn last record is not rewritten, is counted, and every whole record's fingerprint
    reaches the seen set."""
    log, seen, model = opened(tmp_path, 1_000)
    log.close()
    with open(log.path, "ab") as f:  # a crash inside write(2): half a record
        f.write(b"\x01\x02\x03\x04A\x10\x00\x00\x00" + b"x" * 7)
    fresh = FingerprintSet(str(tmp_path / "seen2"), expected_items=10_000, width=WIDTH)
    log = PendingLog(tmp_path, WIDTH)
    assert log.compact(fresh, add_to_seen=True) == len(model.pending)
    assert log.torn_bytes_cut == 16
    assert pending_of(log) == model.pending
    assert all(fp(i) in fresh for i in range(1_000))
    model.add(log, seen, 5_000)  # appends after it are read back
    assert pending_of(PendingLog(tmp_path, WIDTH)) == model.pending
    fresh.close()
    seen.close()
