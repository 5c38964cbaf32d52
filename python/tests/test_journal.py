"""The pending-request log of BloomDupeFilter (bloomsled._journal) and the store's recovery
after each kind of crash, without a crawl: torn tails, compaction, power loss."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bloomsled import FingerprintSet
from bloomsled._journal import ADD, DONE, PendingLog

from conftest import in_ci

if not in_ci():
    pytest.importorskip("scrapy")


def fp(i: int) -> bytes:
    return hashlib.sha1(b"req-%d" % i).digest()


def test_torn_tail_is_cut_and_every_whole_record_kept(tmp_path):
    log = PendingLog(tmp_path, 20)
    for i in range(100):
        log.append_add(fp(i), b"payload-%d" % i)
    for i in range(0, 100, 3):
        log.append_done(fp(i))
    log.close()
    whole = log.size()
    with open(log.path, "ab") as f:  # a crash inside write(2): half a record
        f.write(b"\x01\x02\x03\x04A\x10\x00\x00\x00" + b"x" * 7)
    log = PendingLog(tmp_path, 20)
    recs = list(log.records())
    assert len(recs) == 100 + 34
    assert recs[0] == (ADD, fp(0), b"payload-0")
    assert log.size() == whole and log.torn_bytes_cut == 16


def test_a_flipped_byte_ends_the_valid_prefix(tmp_path):
    log = PendingLog(tmp_path, 20)
    for i in range(10):
        log.append_add(fp(i), b"p" * 30)
    log.close()
    data = bytearray(log.path.read_bytes())
    rec = (len(data) - 8) // 10
    data[8 + 5 * rec + 12] ^= 0xFF  # inside the 6th record's fingerprint
    log.path.write_bytes(bytes(data))
    assert [f for _, f, _ in PendingLog(tmp_path, 20).records()] == [fp(i) for i in range(5)]


def test_foreign_file_is_refused_and_left_alone(tmp_path):
    (tmp_path / "pending.log").write_bytes(b"not a log at all")
    from bloomsled._journal import JournalDamagedError

    with pytest.raises(JournalDamagedError):
        PendingLog(tmp_path, 20)
    assert (tmp_path / "pending.log").read_bytes() == b"not a log at all"


def test_compaction_keeps_pending_and_moves_done(tmp_path):
    log = PendingLog(tmp_path, 20)
    seen = FingerprintSet(str(tmp_path / "seen"), expected_items=10_000, width=20)
    n = 5_000
    for i in range(n):
        log.append_add(fp(i), b"request %d" % i)
        seen.add(fp(i))
    done = {fp(i) for i in range(n) if i % 5 != 0}
    for f in done:
        log.append_done(f)
    before = log.size()
    assert log.compact(seen, add_to_seen=False) == n // 5
    assert log.size() < before / 3
    recs = list(log.records())
    assert all(kind == ADD for kind, _, _ in recs)
    assert {f for _, f, _ in recs} == {fp(i) for i in range(0, n, 5)}
    assert dict((f, p) for _, f, p in recs)[fp(10)] == b"request 10"
    moved = {f for chunk in log.done_fingerprints() for f in chunk}
    assert moved == done
    assert not (tmp_path / "compaction.tmp").exists()
    # New records go after the compacted ones.
    log.append_done(fp(0))
    assert list(log.records())[-1] == (DONE, fp(0), b"")
    seen.close()
    log.close()


def open_filter(path: Path):
    from scrapy import Spider
    from scrapy.crawler import Crawler

    from bloomsled.scrapy import BloomDupeFilter

    # A crawler that is never started: the filter only connects its signals.
    crawler = Crawler(Spider, {})
    return BloomDupeFilter(str(path), expected_items=10_000, crawler=crawler)


def requests(n: int):
    from scrapy import Request

    return [Request(f"http://127.0.0.1/p/{i}") for i in range(n)]


def crash(df) -> None:
    """Drops the filter as a kill -9 would: nothing closed, nothing saved (every record
    was handed to the OS already; the set's unsynced tail is lost with the process)."""
    df.pending_log._fd = None  # noqa: SLF001 - the descriptor dies with the process
    df.seen = None
    df.pending_log = None


@pytest.mark.parametrize("same_boot", [True, False], ids=["process-crash", "power-loss"])
def test_recovery_after_a_crash(tmp_path, same_boot):
    from bloomsled.scrapy import STATE_FILE, STORE_DIR

    reqs = requests(300)
    df = open_filter(tmp_path)
    assert df.recovery == "fresh"
    assert not any(df.request_seen(r) for r in reqs)
    for r in reqs[:200]:
        df._request_done(r)  # noqa: SLF001 - what BloomDoneMiddleware triggers
    # A fingerprint in the seen set whose log record was lost (possible after a power
    # loss, when the set's file reached the disk and the log's tail did not).
    orphan = hashlib.sha1(b"orphan").digest()
    df.seen.add(orphan)
    df.seen.sync()
    crash(df)
    store = tmp_path / STORE_DIR
    if not same_boot:
        state = json.loads((store / STATE_FILE).read_text())
        state["boot_id"] = "another-boot"
        (store / STATE_FILE).write_text(json.dumps(state))
    df = open_filter(tmp_path)
    assert df.recovery == ("process-crash" if same_boot else "power-loss")
    assert df._resume_count == 100  # noqa: SLF001
    assert all(df.request_seen(r) for r in reqs), "an accepted request was forgotten"
    # After a power loss the set is rebuilt from the log and done.fps: the orphan (whose
    # request is nowhere) is forgotten, so its page would be found and fetched again.
    assert (orphan in df.seen) is same_boot
    df.close("finished")
    df = open_filter(tmp_path)
    assert df.recovery == "clean" and df._resume_count == 100  # noqa: SLF001
    df.close("finished")


def test_a_request_too_large_for_the_log_does_not_cut_off_the_records_after_it(
    tmp_path, monkeypatch
):
    """The reader takes a record longer than MAX_PAYLOAD for damage and cuts the log there,
    with every record after it; so such a record must never be written. A request whose
    pickled form is that large (a huge POST body) is accepted like one that cannot be
    pickled: journaled without its payload, with a warning. Every other request
    accepted after it stays pending across a crash."""
    import bloomsled._journal as journal
    from scrapy import Request

    monkeypatch.setattr(journal, "MAX_PAYLOAD", 4096)  # 64 MiB in production
    reqs = requests(20)
    reqs[5] = Request("http://127.0.0.1/upload", method="POST", body=b"x" * 10_000)
    df = open_filter(tmp_path)
    assert not any(df.request_seen(r) for r in reqs)
    seen = df.seen
    crash(df)
    seen.close()  # the logged warning's traceback (kept by pytest) holds the set open
    df = open_filter(tmp_path)
    assert df._resume_count == 20, "requests after the large one were cut off"  # noqa: SLF001
    assert df.pending_log.torn_bytes_cut == 0
    df.close("finished")


@pytest.mark.parametrize("interval", [0.0, -1.0, float("nan"), float("inf")])
def test_a_commit_interval_out_of_range_is_refused_at_once(tmp_path, interval):
    """BLOOMSLED_COMMIT_INTERVAL paces the log's fsync, its compaction and the free-space
    check. A value out of range must be refused when the filter is made, not fail later
    in the spider_opened handler (whose error Scrapy logs and goes on: the crawl then ran
    with none of the three), nor (0) run them at every turn of the reactor."""
    from scrapy import Spider
    from scrapy.crawler import Crawler

    from bloomsled.scrapy import BloomDupeFilter

    with pytest.raises(ValueError, match="BLOOMSLED_COMMIT_INTERVAL"):
        BloomDupeFilter(str(tmp_path), crawler=Crawler(Spider, {}), commit_interval=interval)


def test_a_damaged_count_in_done_fps_is_a_damaged_tail(tmp_path):
    """A chunk of done.fps whose count field is damaged (larger than the file) is a
    damaged tail, cut off like a torn one: reading it must not ask for gigabytes
    (MemoryError on every open, so the store could not be opened again)."""
    import struct
    import zlib

    log = PendingLog(tmp_path, 20)
    log.close()
    body = struct.pack("<I", 2) + fp(1) + fp(2)
    with open(log.done_path, "ab") as f:
        f.write(struct.pack("<I", zlib.crc32(body)) + body)
        whole = f.tell()
        f.write(struct.pack("<II", 12345, 0xFFFFFFF0) + b"garbage")
    log = PendingLog(tmp_path, 20)
    assert [f for chunk in log.done_fingerprints() for f in chunk] == [fp(1), fp(2)]
    assert log.done_path.stat().st_size == whole
    assert log.done_torn_bytes_cut == 15


def test_a_failed_fsync_poisons_the_log_until_it_is_reopened(tmp_path, monkeypatch):
    """Linux reports a failed writeback once and may drop the pages: after one failed
    fsync, no later fsync of the log may return as if the records were durable (issue 57)."""
    import errno
    import os

    from bloomsled._journal import JournalPoisonedError

    log = PendingLog(tmp_path, 20)
    log.append_add(fp(0), b"payload-0")
    real = os.fsync
    calls = []

    def fails_once(fd):
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fails_once)
    with pytest.raises(JournalPoisonedError, match="pending.log.*reopen"):
        log.fsync()
    for act in (log.fsync, lambda: log.append_add(fp(1), b"p"), lambda: log.append_done(fp(0))):
        with pytest.raises(JournalPoisonedError, match="fsync of .*pending.log failed"):
            act()
    assert len(calls) == 1  # no second fsync was even tried
    with pytest.raises(JournalPoisonedError):
        log.close()
    monkeypatch.setattr(os, "fsync", real)
    # The failure is marked beside each file (the core's mark): a process killed now leaves
    # it for the next open in this boot.
    marks = [tmp_path / "pending.log.bloomsled-rewrite-needed",
             tmp_path / "done.fps.bloomsled-rewrite-needed"]
    assert all(m.exists() for m in marks)
    inode = (tmp_path / "pending.log").stat().st_ino
    # Reopened: what the OS holds is read back (here every record reached it), rewritten
    # into new files first, so the reopen appends to what is on the disk, not after pages
    # the failed fsync may never have written.
    log = PendingLog(tmp_path, 20)
    assert not any(m.exists() for m in marks)
    assert (tmp_path / "pending.log").stat().st_ino != inode, "not rewritten"
    assert [k for k, _, _ in log.records()] == [ADD]
    log.append_add(fp(1), b"p")
    assert log.fsync()
    log.close()
    # Once: the next open finds no mark and rewrites nothing.
    inode = (tmp_path / "pending.log").stat().st_ino
    log = PendingLog(tmp_path, 20)
    assert (tmp_path / "pending.log").stat().st_ino == inode
    assert [k for k, _, _ in log.records()] == [ADD, ADD]
    log.close()
