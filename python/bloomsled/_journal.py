"""The files of ``BloomDupeFilter``'s resumable store: a log of pending requests and a
file of done fingerprints. Pure Python, no per-entry memory: each is read by streaming.

``pending.log``, an append-only log of CRC-checked records::

    header   b"BSPLOG" 0x00 0x01                   (magic, format version 1)
    record   crc32 u32 | kind u8 | length u32 | fp (width bytes) | payload (length bytes)

``kind`` is ``A`` (a request accepted: the payload is the pickled request) or ``D`` (a
request done: no payload). The CRC32 (little-endian, like every integer here) covers
``kind`` through ``payload``. A request is *pending* if the log holds its ``A`` record and
no ``D`` record for its fingerprint. Each record is handed to the OS by one ``write(2)``
(no buffering in the process): a process crash loses none of them, and a torn last record
(a crash inside the call) fails its CRC and is cut off at the next open. Only
:meth:`PendingLog.fsync` makes records survive a power loss.

``done.fps``, an append-only file of chunks of done fingerprints (used only to rebuild the
seen set after a power loss)::

    header   b"BSDONE" 0x00 0x01
    chunk    crc32 u32 | count u32 | count * width bytes        (crc32 covers count..end)

Compaction (:meth:`PendingLog.compact`) moves the fingerprints of the ``D`` records into
``done.fps`` (appended and fsynced first) and rewrites the log with only the pending ``A``
records (temporary file, fsync, rename, folder fsync), so the log stays about the size of
the frontier. The set of done fingerprints it needs while it runs is a temporary
``FingerprintSet`` on disk, whose memory is its small filter.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import shutil
import struct
import zlib
from pathlib import Path
from typing import Iterator, Optional, Tuple

from ._bloomsled import FingerprintSet, _mark_failed_sync, _rewrite_after_failed_sync

logger = logging.getLogger(__name__)

LOG_MAGIC = b"BSPLOG\x00\x01"
DONE_MAGIC = b"BSDONE\x00\x01"
ADD = ord("A")
DONE = ord("D")
_HEAD = struct.Struct("<IBI")  # crc32, kind, payload length
_CHUNK = struct.Struct("<II")  # crc32, count
#: Fingerprints per lookup batch and per ``done.fps`` chunk during a compaction.
_BATCH = 65_536
#: A payload longer than this is not a request this module wrote: the record is damaged.
MAX_PAYLOAD = 64 * 1024 * 1024


class JournalDamagedError(Exception):
    """A journal file that is not one (wrong magic): nothing is changed or deleted."""


class JournalPoisonedError(OSError):
    """An fsync of the journal failed: the kernel may have dropped the pages it could not
    write and reports that only once, so a later fsync that returns could vouch for
    records that are gone (PostgreSQL's "fsyncgate"). From then on every append, fsync and
    compaction of this :class:`PendingLog` raises this error, naming the file and the step;
    reopening the journal (resuming the crawl from its ``JOBDIR``) recovers from what is on
    disk, and a request whose record was lost is fetched again, never dropped."""


def fsync_dir(path: Path) -> None:
    """Makes a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _check_magic(path: Path, magic: bytes) -> None:
    with open(path, "rb") as f:
        got = f.read(len(magic))
    if got != magic:
        raise JournalDamagedError(
            f"{path} does not start with {magic!r} (got {got!r}): not a bloomsled journal "
            "file of this version; it is left untouched"
        )


def _create(path: Path, magic: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(magic)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def encode_record(kind: int, fp: bytes, payload: bytes = b"") -> bytes:
    """One log record (see the module docs)."""
    body = bytes((kind,)) + struct.pack("<I", len(payload)) + fp + payload
    return struct.pack("<I", zlib.crc32(body)) + body


class PendingLog:
    """``pending.log`` in ``folder`` (created if absent), opened for appending."""

    def __init__(self, folder: Path, width: int) -> None:
        self.folder = Path(folder)
        self.width = width
        self.path = self.folder / "pending.log"
        self.done_path = self.folder / "done.fps"
        # After a failed fsync (marked by :meth:`sync_fd`): the files as this process reads
        # them, made durable before anything is appended to them.
        for f in (self.path, self.done_path):
            if _rewrite_after_failed_sync(f):
                logger.warning("%s was rewritten after a failed fsync", f)
        if not self.path.exists():
            _create(self.path, LOG_MAGIC)
        _check_magic(self.path, LOG_MAGIC)
        if not self.done_path.exists():
            _create(self.done_path, DONE_MAGIC)
        _check_magic(self.done_path, DONE_MAGIC)
        self._fd: Optional[int] = None
        #: Bytes written since the last fsync (the tick syncs only when there are some).
        self.unsynced = 0
        #: Accepted and done records since the log was last rewritten, and their bytes.
        self.adds = 0
        self.add_bytes = 0
        self.dones = 0
        self.torn_bytes_cut = 0
        #: Where the last full read of :meth:`records` stopped: the end of the valid prefix.
        self.read_end = 0
        self.done_torn_bytes_cut = 0
        #: Why the journal acknowledges nothing any more (a failed fsync), if it does not.
        self.poisoned: Optional[str] = None

    # -- failed fsyncs ------------------------------------------------------------------

    def check_poisoned(self) -> None:
        """Raises :class:`JournalPoisonedError` if an fsync of the journal failed before."""
        if self.poisoned is not None:
            raise JournalPoisonedError(errno.EIO, self.poisoned)

    def sync_fd(self, fd: int, path: Path, step: str = "fsync") -> None:
        """``os.fsync(fd)`` of ``path``; a failure poisons the journal (see
        :class:`JournalPoisonedError`) and raises that error."""
        self.check_poisoned()
        try:
            os.fsync(fd)
        except OSError as e:
            self.poisoned = (
                f"{step} of {path} failed ({e}): the journal acknowledges nothing as durable "
                "any more; reopen it (resume the crawl) to recover"
            )
            # The page cache may show records the disk never got: the next open (in this
            # process or the next one of this boot) rewrites both files first, so that it
            # does not append after a hole a power cut would reveal (the core's rewrite).
            for f in (self.path, self.done_path):
                _mark_failed_sync(f)
            raise JournalPoisonedError(e.errno or errno.EIO, self.poisoned) from e

    def sync_dir(self, path: Path) -> None:
        """:func:`fsync_dir` of ``path``, poisoning the journal if it fails."""
        fd = os.open(path, os.O_RDONLY)
        try:
            self.sync_fd(fd, path, "fsync of the folder")
        finally:
            os.close(fd)

    # -- appending ----------------------------------------------------------------------

    def _open_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        return self._fd

    def _append(self, rec: bytes) -> None:
        """Appends one record whole, or not at all: a write that fails part-way (a full
        disk, a quota) is cut off again before the error is raised, so that records
        appended later (once space is freed) never follow a torn one, which the next open
        would cut off with them."""
        self.check_poisoned()
        fd = self._open_fd()
        end = os.fstat(fd).st_size
        try:
            _write_all(fd, rec)
        except OSError:
            try:
                os.ftruncate(fd, end)
            except OSError as e:  # left torn: the next open cuts it, with what follows
                logger.error("bloomsled: %s: cannot cut a failed append off: %s", self.path, e)
            raise
        self.unsynced += len(rec)

    def append_add(self, fp: bytes, payload: bytes) -> None:
        """Journals an accepted request: in the OS when this returns (one ``write(2)``).
        Raises ``OSError`` (the log unchanged) if it cannot be written, ``ValueError`` for
        a payload over ``MAX_PAYLOAD`` (which :meth:`records` would take for damage, and
        cut off with every record after it)."""
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"a payload of {len(payload)} bytes, over {MAX_PAYLOAD}")
        rec = encode_record(ADD, fp, payload)
        self._append(rec)
        self.adds += 1
        self.add_bytes += len(rec)

    def append_done(self, fp: bytes) -> None:
        """Records a request as done: in the OS when this returns (one ``write(2)``).
        Raises ``OSError`` (the log unchanged) if it cannot be written."""
        self._append(encode_record(DONE, fp))
        self.dones += 1

    def fsync(self) -> bool:
        """Makes every record appended so far survive a power loss; True if it synced."""
        self.check_poisoned()
        if self._fd is None or not self.unsynced:
            return False
        self.sync_fd(self._fd, self.path)
        self.unsynced = 0
        return True

    def close(self) -> None:
        try:
            self.fsync()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def dead_bytes(self) -> int:
        """An estimate of the bytes a compaction would drop (done requests' records)."""
        avg = self.add_bytes / self.adds if self.adds else 0
        return int(min(self.dones, self.adds) * avg) + self.dones * _HEAD.size

    # -- reading ------------------------------------------------------------------------

    def records(self, end: Optional[int] = None) -> Iterator[Tuple[int, bytes, bytes]]:
        """(kind, fp, payload) of every valid record, in order, up to ``end`` bytes.

        Stops at the first record that is torn or fails its CRC and cuts the file there
        (only the tail a crash can leave: nothing before it was readable past it).
        """
        w = self.width
        with open(self.path, "rb", buffering=0) as raw:
            f = io.BufferedReader(raw, buffer_size=1 << 20)
            f.read(len(LOG_MAGIC))
            pos = len(LOG_MAGIC)
            size = os.fstat(raw.fileno()).st_size if end is None else end
            while pos < size:
                head = f.read(_HEAD.size)
                if len(head) < _HEAD.size:
                    break
                crc, kind, length = _HEAD.unpack(head)
                if kind not in (ADD, DONE) or length > MAX_PAYLOAD:
                    break
                rest = f.read(w + length)
                if len(rest) < w + length or zlib.crc32(head[4:] + rest) != crc:
                    break
                pos += _HEAD.size + w + length
                yield kind, rest[:w], rest[w:]
        self.read_end = pos
        if end is None and pos < size:
            self._cut(pos, size)

    def _cut(self, pos: int, size: int) -> None:
        self._torn_tail_dropped(pos, size)
        with open(self.path, "r+b") as f:
            f.truncate(pos)
            f.flush()
            os.fsync(f.fileno())

    def done_fingerprints(self) -> Iterator[list[bytes]]:
        """Chunks of ``done.fps``, stopping at (and cutting) a torn or damaged tail."""
        w = self.width
        size = self.done_path.stat().st_size
        pos = len(DONE_MAGIC)
        with open(self.done_path, "rb") as f:
            f.seek(pos)
            while pos < size:
                head = f.read(_CHUNK.size)
                if len(head) < _CHUNK.size:
                    break
                crc, count = _CHUNK.unpack(head)
                if count * w > size - pos - _CHUNK.size:
                    break  # longer than the file: a damaged count (never read it whole)
                body = f.read(count * w)
                if len(body) < count * w or zlib.crc32(head[4:] + body) != crc:
                    break
                pos += _CHUNK.size + count * w
                yield [body[i : i + w] for i in range(0, len(body), w)]
        if pos < size:
            logger.warning("bloomsled: %s: torn tail of %d bytes cut off", self.done_path, size - pos)
            self.done_torn_bytes_cut += size - pos
            with open(self.done_path, "r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())

    def size(self) -> int:
        return self.path.stat().st_size

    # -- compaction ---------------------------------------------------------------------

    def compact(self, seen: FingerprintSet, add_to_seen: bool) -> int:
        """Moves done fingerprints to ``done.fps`` and rewrites the log with the pending
        requests only, all at once; returns their number.

        ``add_to_seen``: also add every fingerprint of the log to ``seen`` (after a crash,
        whose set may have lost its unsynced tail). Order, so that a crash anywhere in
        here loses nothing: the log is fsynced (the ``D`` records, and before them the
        ``A`` records of every request a done callback yielded); ``seen`` is synced (a
        fingerprint leaves the log only once ``seen`` holds it durably); the done
        fingerprints are appended to ``done.fps`` and fsynced; only then is the new log
        renamed over the old one. (:meth:`begin_compaction` is the same work in three
        steps, the long one free to run beside appends.)
        """
        job = self.begin_compaction(seen)
        job.fill = seen if add_to_seen else None
        try:
            job.run()
        except BaseException:
            job.abort()
            raise
        pending = job.install()
        if job.valid_end < job.end:  # a torn tail (a crash while appending): not rewritten
            self._torn_tail_dropped(job.valid_end, job.end)
        return pending

    def _torn_tail_dropped(self, pos: int, size: int) -> None:
        logger.warning(
            "bloomsled: %s: %d bytes after offset %d are a torn or damaged tail (a crash "
            "while appending); cut off",
            self.path,
            size - pos,
            pos,
        )
        self.torn_bytes_cut += size - pos

    def begin_compaction(self, seen: FingerprintSet) -> "Compaction":
        """Starts a compaction of the log as it is now, to be run by another thread while
        records are appended (the caller serialises this call, :meth:`Compaction.install`
        and :meth:`Compaction.abort` with its appends; :meth:`Compaction.run` needs no
        lock). Syncs ``seen`` and the log first: the compacted part then holds only
        records whose fingerprints ``seen`` keeps durably."""
        self.check_poisoned()
        seen.sync()
        self.fsync()
        tmpdir = self.folder / "compaction.tmp"
        if tmpdir.exists():
            shutil.rmtree(tmpdir)  # a compaction's leftover from a crash
        tmp = self.path.with_name("pending.log.tmp")
        tmp.unlink(missing_ok=True)
        return Compaction(self, tmpdir, tmp)

    def _installed(self, job: "Compaction") -> None:
        """The counters after ``job``'s new log replaced the old one (records appended
        while it ran were copied after its pending ones)."""
        if self._fd is not None:
            os.close(self._fd)  # the old file's: the next append opens the new log
            self._fd = None
        self.adds = job.pending + (self.adds - job.adds_before)
        self.add_bytes = job.pending_bytes + (self.add_bytes - job.add_bytes_before)
        self.dones -= job.dones_before
        self.unsynced = 0

    def _move_done(self, done: FingerprintSet, out: io.BufferedWriter, batch: list[bytes]) -> None:
        done.add_many(batch)
        body = struct.pack("<I", len(batch)) + b"".join(batch)
        out.write(struct.pack("<I", zlib.crc32(body)) + body)


class Compaction:
    """One compaction of a :class:`PendingLog` (made by
    :meth:`PendingLog.begin_compaction`): the log's first ``end`` bytes are compacted by
    :meth:`run`, which another thread may do while records are appended past ``end``;
    :meth:`install` then copies those records after the pending ones and renames the new
    log over the old one, or :meth:`abort` drops the work and leaves the old log whole.

    A crash at any point loses nothing: until the rename the old log is whole (and the
    done fingerprints appended to ``done.fps`` meanwhile are only duplicates of its ``D``
    records); the new log is fsynced, tail included, before the rename, and the folder
    after it.
    """

    def __init__(self, log: PendingLog, tmpdir: Path, tmp: Path) -> None:
        self.log = log
        self.end = log.size()
        self.done_size = log.done_path.stat().st_size
        self.adds_before = log.adds
        self.add_bytes_before = log.add_bytes
        self.dones_before = log.dones
        self.tmpdir = tmpdir
        self.tmp = tmp
        #: Pending requests in the compacted part, and their bytes (set by :meth:`run`).
        self.pending = 0
        self.pending_bytes = 0
        #: Set by :meth:`run` when it raised: :meth:`abort` is then the only way on.
        self.error: Optional[BaseException] = None
        #: A set that pass 1 also gives every fingerprint of the compacted part, synced
        #: before the new log exists (after a crash: ``seen``, which may have lost its
        #: unsynced tail). Only for a compaction with no appends beside it.
        self.fill: Optional[FingerprintSet] = None
        #: Where the compacted part's valid records end (set by :meth:`run`): short of
        #: ``end`` only for a torn tail, which the new log leaves out.
        self.valid_end = self.end

    def run(self) -> None:
        """The long part: reads the log's first ``end`` bytes twice, appends their done
        fingerprints to ``done.fps`` (fsynced) and writes their pending requests to
        ``pending.log.tmp`` (not yet synced). Touches neither the log's descriptor nor its
        counters; raises what fails (a full disk), after which only :meth:`abort` may
        follow."""
        try:
            self._run()
        except BaseException as e:
            self.error = e
            raise

    def _run(self) -> None:
        log = self.log
        self.tmpdir.mkdir()
        done = FingerprintSet(
            str(self.tmpdir / "done"),
            expected_items=max(1024, self.dones_before),
            fpr=0.01,
            width=log.width,
        )
        try:
            # Pass 1: the done fingerprints, into the temporary set and done.fps.
            batch: list[bytes] = []
            every: list[bytes] = []
            fill = self.fill
            with open(log.done_path, "ab") as out:
                for kind, fp, _ in log.records(end=self.end):
                    if kind == DONE:
                        batch.append(fp)
                        if len(batch) >= _BATCH:
                            log._move_done(done, out, batch)
                            batch = []
                    if fill is not None:
                        every.append(fp)
                        if len(every) >= _BATCH:
                            fill.add_many(every)
                            every = []
                self.valid_end = log.read_end
                if batch:
                    log._move_done(done, out, batch)
                out.flush()
                log.sync_fd(out.fileno(), log.done_path)
            if fill is not None:
                if every:
                    fill.add_many(every)
                fill.sync()  # a fingerprint leaves the log only once the set holds it
            # Pass 2: the pending records, into the new log.
            with open(self.tmp, "wb") as out:
                out.write(LOG_MAGIC)
                recs: list[Tuple[bytes, bytes]] = []

                def flush_recs() -> None:
                    for (fp, payload), is_done in zip(
                        recs, done.contains_many([fp for fp, _ in recs])
                    ):
                        if not is_done:
                            rec = encode_record(ADD, fp, payload)
                            out.write(rec)
                            self.pending_bytes += len(rec)
                            self.pending += 1
                    recs.clear()

                for kind, fp, payload in log.records(end=self.end):
                    if kind == ADD:
                        recs.append((fp, payload))
                        if len(recs) >= _BATCH // 16:
                            flush_recs()
                flush_recs()
        finally:
            done.close()
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def install(self) -> int:
        """Copies the records appended since :meth:`begin_compaction` after the pending
        ones, fsyncs the new log, renames it over the old one and fsyncs the folder;
        returns the number of pending requests in the compacted part. The caller holds
        the lock of its appends. On an error the old log stays (and :meth:`abort` cleans
        up)."""
        assert self.error is None, "install after a failed run"
        log = self.log
        log.fsync()
        with open(self.tmp, "ab") as out:
            with open(log.path, "rb") as old:
                old.seek(self.end)
                shutil.copyfileobj(old, out, 1 << 20)
            out.flush()
            log.sync_fd(out.fileno(), self.tmp)
        os.replace(self.tmp, log.path)
        log.sync_dir(log.folder)
        log._installed(self)
        return self.pending

    def abort(self) -> None:
        """Drops this compaction: the old log is whole and stays; the chunks it appended
        to ``done.fps`` are cut off again (a torn chunk would hide later ones)."""
        self.tmp.unlink(missing_ok=True)
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        with open(self.log.done_path, "r+b") as f:
            f.truncate(self.done_size)
