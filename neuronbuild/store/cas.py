"""One content-addressed store at one URL, laid out as :mod:`neuronbuild.store.layout` says.

Publish order is blobs, unit records, manifest, ref, so a reader never finds a manifest whose blobs
are missing. Every write is atomic (see :mod:`neuronbuild.transports.backends`); a crash leaves at
most an orphan temporary file, an unreferenced blob, or a ref-history entry of a move that never
happened (readers skip it: see :meth:`Store.ref_history`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from neuronbuild.digest import (
    DigestMismatch,
    canonical_json,
    check_digest,
    copy_verified,
    hash_file,
    hex_of,
    sha256_digest,
    short,
)
from neuronbuild.errors import NoRoom, StoreDataInvalid, StoreError, UserError
from neuronbuild.folders import FolderInTheWay, check_writable_folder
from neuronbuild.human import count
from neuronbuild.store.index import Index
from neuronbuild.store.layout import (
    LATEST,
    MAX_ADDITIONS,
    MAX_ATTESTATION_BYTES,
    MAX_ATTESTATIONS,
    MAX_RECORD_BYTES,
    MAX_SMALL_BYTES,
    Layout,
    parse_ref,
)
from neuronbuild.store.names import Accept, Listing, Target, resolve
from neuronbuild.store.records import (
    MAX_TIMING_SECONDS,
    FileRecord,
    Manifest,
    RefMove,
    UnitRecord,
    UnitTiming,
)
from neuronbuild.transports import retry
from neuronbuild.transports.backends import Backend, FolderBackend, SwapConflict
from neuronbuild.transports.schemes import FOLDER, open_backend, row_of, scheme_of

__all__ = ["LATEST", "RefConflict", "Store", "parse_ref"]

LIST_THRESHOLD = 64
"""Above this many blobs, presence is checked from one listing instead of one request each."""

UPLOAD_ATTEMPTS = 3
"""Uploads of one blob before giving up when the stored size keeps differing."""

SCHEME_WITHOUT_SLASHES = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:(?!//)")
"""``s3:/bucket`` or ``s3:bucket``: a URL missing a slash, which fsspec would read as a folder."""


CONDEMNED_SECONDS = 3600.0
"""How long a gc run's condemned marker holds ref moves off its manifest (seconds, by the
store's clock); an older marker is one a killed gc left behind, and no longer counts. A gc
stops deleting once half of it has passed since it wrote its markers."""


class RefConflict(StoreError):
    """A compare-and-swap ref move found another manifest than expected."""


def check_url(url: str) -> None:
    """Refuse store URLs that would silently name another place than meant.

    Raises:
        UserError: an empty URL (it would make the current folder a store) or a scheme
            without its ``//`` (``s3:/bucket`` would be a local folder named ``s3:``).
    """
    if not url.strip():
        raise UserError("--cache '': give a folder or a URL such as s3://bucket/prefix")
    if SCHEME_WITHOUT_SLASHES.match(url):
        scheme, _, rest = url.partition(":")
        raise UserError(
            f"--cache {url!r}: a URL needs '//' after its scheme; did you mean "
            f"{scheme}://{rest.lstrip('/')}?"
        )


def planning_store(url: str, *, given: bool) -> Store | None:
    """The store ``plan`` asks which units it holds (:meth:`Store.cached_units`), or None
    when it must not read one.

    Planning is offline and instant: unless the user ``given`` the store (``--cache`` on the
    command line), only a default store that is a local folder that exists is read; a default
    ``s3://`` or other remote store (``$NEURONBUILD_CACHE``) is never contacted.

    Raises:
        UserError: a malformed store URL.
        StoreError: the store cannot be read (a given store that does not exist included).
    """
    if not given:
        path = url.partition("://")[2] if scheme_of(url) else url
        if row_of(url) is not FOLDER or not Path(path).expanduser().is_dir():
            return None
    return Store(url, missing_ok=not given)


def _copied_in_kernel(
    src: IO[bytes], out: IO[bytes], file: FileRecord, url: str, count: Callable[[int], None]
) -> bool:
    """Copy a folder store's blob (``src``, a regular file: the folder backend opens no other)
    of ``file.size`` bytes into ``out`` in the kernel (``copy_file_range``: no pass through this
    process, as ``cp`` copies); the caller then hashes the copy, reading it back from the page
    cache, so a fetch costs a plain copy and one sha256 pass. False, with nothing written,
    where the file systems cannot (another kernel's, a file system without it): the caller
    copies and hashes in one pass instead.

    Raises:
        DigestMismatch: the blob is not ``file.size`` bytes long.
    """
    found = os.fstat(src.fileno()).st_size
    if found != file.size:
        raise DigestMismatch(
            f"{url} is corrupt (expected {file.digest}, {file.size} bytes; found {found} bytes)",
            f"{found} bytes",
        )
    left = file.size
    try:
        while left > 0:
            n = os.copy_file_range(src.fileno(), out.fileno(), min(left, 1 << 30))
            if n == 0:
                break
            left -= n
            count(n)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
        if left == file.size:
            return False
        raise
    return True


class Store:
    """A compile cache at ``url`` (a folder path, ``file://``, ``s3://bucket/prefix``,
    ``oci://HOST/REPOSITORY`` or ``oci+http://`` (an OCI registry, :mod:`neuronbuild.store.oci`),
    or another fsspec URL, read-only there unless ``last_writer_wins``).

    The root must exist (``create``: a missing folder is created, for commands that publish;
    ``missing_ok``: a missing root reads as empty, for their dry runs).
    Credentials, region and endpoint of ``s3://`` come from the usual AWS environment and config
    (``AWS_ENDPOINT_URL`` included).

    Raises:
        UserError: an unusable URL, or a root that is a file (exit code 2).
        StoreError: the store does not exist, cannot be reached or written (exit code 3).
        StoreDataInvalid: a record or manifest in it is malformed or hostile (exit code 2).
    """

    def __init__(
        self,
        url: str,
        *,
        last_writer_wins: bool = False,
        create: bool = False,
        missing_ok: bool = False,
    ) -> None:
        check_url(url)
        self.url = url
        self.backend: Backend = open_backend(url, last_writer_wins, Layout)
        self.layout = Layout(self.backend.root)
        self.root = self.layout.root
        self.blobs_elsewhere: Store | None = None
        """A store whose blobs count as this one's (a ``compile --stage`` folder leans on the
        shared store it read: records and manifests name blobs only that store holds)."""
        self._verified: dict[str, tuple[int, int, int]] = {}
        """Folder stores: blobs this process verified (hashed, or wrote after hashing), by
        digest, with their file's size, mtime and inode then (see :meth:`check_blob`)."""
        if missing_ok and not self.backend.exists(self.root):
            return  # read as empty (a dry run of a command that would create it)
        self.backend.check_root(create)

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @property
    def is_folder(self) -> bool:
        """Whether the store is a local (or NFS) folder, usable as a node's local tier."""
        return isinstance(self.backend, FolderBackend)

    def check_writable(self, *, leave_nothing: bool = False, option: str = "--cache") -> None:
        """Write and delete a probe object (the backend's ``probe``), so a read-only store fails
        before hours of work.

        ``leave_nothing`` (a dry run) writes nothing anywhere: a folder store, existing or not,
        is probed by :func:`~neuronbuild.folders.check_writable_folder`, which creates no folder
        either; any other store is refused when it refuses every write (no atomic writes and
        no ``--last-writer-wins``) or its root does not answer (a missing bucket). ``option``
        names the store in messages.

        Raises:
            UserError: publishing is not possible at this URL, or a file stands where the store
                folder must be. StoreError: the write failed.
        """
        if leave_nothing and self.is_folder:
            try:
                check_writable_folder(Path(self.layout.tmp("probe")).parent)
            except FolderInTheWay as exc:
                raise UserError(f"{option} {self.url}: {exc}; give a folder") from None
            except OSError as exc:
                raise StoreError(
                    f"{option} {self.url}: cannot write in {exc.filename} ({exc.strerror}); "
                    "give a folder this user can write, or fix its permissions"
                ) from None
            return
        if leave_nothing:  # a dry run writes nothing anywhere
            self.backend.check_writes_allowed()
            self.backend.check_root(create=False)  # a bucket or repository that answers
            return
        try:
            self.backend.probe(self.layout.tmp(f"probe-{uuid.uuid4().hex}"))
        except FileNotFoundError as exc:  # s3fs's NoSuchBucket
            raise StoreError(
                f"{option} {self.url}: cannot write there: {exc.strerror or exc}; check the URL"
            ) from None

    def url_of(self, path: str) -> str:
        """The full URL of a path of this store, for messages."""
        return self.backend.fs.unstrip_protocol(path)  # type: ignore[no-any-return]

    def blob_url(self, digest: str) -> str:
        """The blob's full URL, for messages."""
        return self.url_of(self.layout.blob(digest))

    # Blobs.

    def has_blob(self, file: FileRecord) -> bool:
        """Whether the blob is present with the expected size (bytes)."""
        return self.backend.size(self.layout.blob(file.digest)) == file.size

    def missing_blobs(self, files: Iterable[FileRecord], workers: int = 16) -> list[FileRecord]:
        """The files whose blob is absent or of the wrong size.

        Up to :data:`LIST_THRESHOLD` blobs are checked one request each, concurrently; more are
        checked against one paginated listing of ``blobs/`` (1,000 keys per S3 request). A blob
        :attr:`blobs_elsewhere` holds is not missing.
        """
        missing = self._missing_here(files, workers)
        if missing and self.blobs_elsewhere is not None:
            return self.blobs_elsewhere.missing_blobs(missing, workers)
        return missing

    def _missing_here(self, files: Iterable[FileRecord], workers: int) -> list[FileRecord]:
        unique = list({e.digest: e for e in files}.values())
        if len(unique) > LIST_THRESHOLD and self.backend.lists_blobs:
            sizes = self.backend.list_sizes(self.layout.folder("blobs"))
            return [e for e in unique if sizes.get(self.layout.blob(e.digest)) != e.size]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            present = list(pool.map(self.has_blob, unique))
        return [e for e, ok in zip(unique, present, strict=True) if not ok]

    def put_file(
        self, local_path: str | Path, on_bytes: Callable[[int], None] | None = None
    ) -> tuple[str, int]:
        """Store a local file's bytes as a blob; returns ``(digest, size in bytes)``.

        The file is hashed first and uploaded only when the store lacks that blob; its stored
        size is checked after the upload, so a blob is never stored under the wrong digest.
        ``on_bytes`` is told the bytes uploaded as they go (a progress bar).
        """
        digest, size = hash_file(local_path)
        file = FileRecord("blob", digest, size)
        if self.has_blob(file):
            return digest, size

        def upload() -> None:
            self.backend.put_file(local_path, self.layout.blob(digest), on_bytes)
            if not self.has_blob(file):
                raise retry.Failing(retry.Fault(f"the stored size differs from {size} bytes"))

        url = self.blob_url(digest)
        retry.retried(
            upload,
            url,
            attempts=UPLOAD_ATTEMPTS,
            give_up=lambda *_: StoreError(f"{url}: uploads keep leaving the wrong size"),
            pace=lambda attempt: 0.0,  # a size that differs is no fault to wait out
        )
        return digest, size

    def put_files(self, paths: list[Path], jobs: int = 8) -> list[tuple[str, int]]:
        """Store many local files as blobs: hashed, one batched presence check, then only the
        missing ones uploaded, ``jobs`` at a time; a held blob whose bytes differ
        (:meth:`check_held`) is replaced. Returns ``(digest, size)`` per path."""
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            hashed = list(pool.map(hash_file, paths))
            files = [FileRecord(str(p), d, s) for p, (d, s) in zip(paths, hashed, strict=True)]
            missing = {e.digest for e in self.missing_blobs(files)}
            held = list({e.digest: e for e in files if e.digest not in missing}.values())
            # A blob of the right size but other bytes would be sealed as this file: replace it.
            for file, problem in zip(held, pool.map(self.check_held, held), strict=True):
                if problem is not None:
                    self.delete_blob(file)
                    missing.add(file.digest)
            todo = {e.digest: Path(e.path) for e in files if e.digest in missing}
            list(pool.map(self.put_file, todo.values()))
        return hashed

    def put_verified(
        self, local: Path, file: FileRecord, on_bytes: Callable[[int], None] | None = None
    ) -> None:
        """Store a local file whose bytes were just verified against ``file``: renamed into place
        on a folder store on the same file system (no second copy), uploaded elsewhere (telling
        ``on_bytes`` the bytes uploaded)."""
        if isinstance(self.backend, FolderBackend):
            seen = _stat_key(Path(local))  # a rename keeps the inode and the mtime
            self.backend.move_in(local, self.layout.blob(file.digest))
            self._verified[file.digest] = seen
        else:
            self.put_file(local, on_bytes)

    def delete_blob(self, file: FileRecord) -> None:
        """Remove a blob (a corrupt copy in a local tier, before fetching it again)."""
        self._verified.pop(file.digest, None)
        self.backend.delete(self.layout.blob(file.digest))

    def local_blob_path(self, file: FileRecord) -> Path | None:
        """The blob's file on this machine's disk (folder stores only; None elsewhere)."""
        return Path(self.layout.blob(file.digest)) if self.is_folder else None

    def fetch_blob(
        self, file: FileRecord, dest: str | Path, on_bytes: Callable[[int], None] | None = None
    ) -> None:
        """Copy a blob to the local file ``dest``, verifying its sha256 and size on the way and
        reading at most its size + 1 bytes (``on_bytes`` is told each chunk's length; a blob
        read again is told only the bytes past those already told, so progress never passes
        the blob's size).

        Raises:
            StoreDataInvalid: the blob is missing, not a regular file, or its bytes do not match
                (its URL is named); ``dest`` is not written.
            StoreError: the store failed while reading.
        """
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name[:200]}.{uuid.uuid4().hex}.part")
        url = self.blob_url(file.digest)
        told = [0, 0]  # bytes of this read so far, bytes told to on_bytes (over all reads)

        def count(n: int) -> None:  # a read again is told only bytes past the earlier reads'
            told[0] += n
            if on_bytes is not None and told[0] > told[1]:
                on_bytes(told[0] - told[1])
                told[1] = told[0]

        def read() -> None:
            told[0] = 0
            src = self.backend.open_read(self.layout.blob(file.digest), file.size)
            with src, open(tmp, "wb") as out:  # a read again starts the file again
                if self.is_folder and _copied_in_kernel(src, out, file, url, count):
                    with open(tmp, "rb") as kept:  # what is kept is what is verified
                        copy_verified(kept, None, file.digest, file.size, url)
                    return
                copy_verified(src, out, file.digest, file.size, url, count)

        try:
            self._read_blob(file, read)
            tmp.replace(dest)
        except FileNotFoundError:
            raise StoreDataInvalid(f"{url} is missing") from None
        except DigestMismatch as exc:  # never silently: the one way out, named
            raise DigestMismatch(
                f"{exc}; `neuronbuild verify REF --deep --repair --cache {self.url}` removes it, "
                "then compile rebuilds it, or push --from (pull, into a local tier) copies it back "
                "from a store holding it whole",
                exc.found,
            ) from None
        except (StoreDataInvalid, StoreError):
            raise
        except OSError as exc:  # a full or read-only ``dest`` is the node's, not the store's
            raise NoRoom.of(exc, dest.parent) or StoreError(f"{url}: {exc}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def check_blob(self, file: FileRecord, *, trust_verified: bool = False) -> str | None:
        """Re-hash a stored blob: None when intact, else a one-line problem naming its URL.

        ``trust_verified`` (``serve``'s lay-out): on a folder store, a blob this process
        already verified (here, or by writing it with :meth:`put_verified`) is not hashed again
        while its file keeps the size, mtime and inode it had then, as the lay-out stamp trusts
        a laid-out file: a fresh node hashes each fetched byte once. ``verify --deep`` and
        ``--deep-verify`` hash anyway: bit rot keeps all three."""
        url = self.blob_url(file.digest)
        path = self.local_blob_path(file)
        seen = None
        if path is not None:
            with contextlib.suppress(OSError):  # missing: the read below says so
                seen = _stat_key(path)
            if trust_verified and seen is not None and self._verified.get(file.digest) == seen:
                return None

        def read() -> None:
            with self.backend.open_read(self.layout.blob(file.digest), file.size) as f:
                copy_verified(f, None, file.digest, file.size, url)

        try:
            self._read_blob(file, read)
        except FileNotFoundError:
            return f"{url}: missing ({file.path})"
        except StoreDataInvalid as exc:
            return str(exc)
        if seen is not None:  # taken before the read: a change while hashing is seen next time
            self._verified[file.digest] = seen
        return None

    def _read_blob(self, file: FileRecord, read: Callable[[], None]) -> None:
        """``read()`` (one verified read of ``file``'s blob), again when its bytes did not
        match and the store's bytes may be whole, each read again said on stderr as a retry.

        A mismatch on a folder is the bytes at rest: refused at once. Over the network
        (:attr:`~neuronbuild.transports.backends.Backend.rereads_mismatch`) bytes can also change in
        transit, which no client checks on obstore's GETs (botocore checked S3's stored checksum on
        s3fs's): the store's own SHA-256 (one HEAD, kept for blobs uploaded in one PUT) decides.
        Equal to the digest, the store holds the bytes whole and the read is retried as a broken
        body is (:data:`~neuronbuild.transports.retry.ATTEMPTS` reads, then a StoreError);
        different, the blob is corrupt at rest (refused at once). Where the store keeps none
        (multipart blobs), the blob is read again until two reads find the same wrong bytes, which
        is corruption at rest.

        Raises:
            DigestMismatch: the blob is corrupt (its bytes at rest differ from its digest).
            StoreError: its bytes did not match for
                :data:`~neuronbuild.transports.retry.ATTEMPTS` reads while the store's SHA-256 says
                it holds them whole, or (none kept) they differed at every read: the network, not
                the store (exit code 3).
        """
        found: list[str] = []
        stored: list[str | None] = []  # the store's own SHA-256, asked once, at the first miss

        def attempt() -> None:
            try:
                read()
            except DigestMismatch as exc:
                if not self.backend.rereads_mismatch:
                    raise
                if not stored:
                    stored.append(self.backend.stored_sha256(self.layout.blob(file.digest)))
                whole_at_rest = stored[0] == hex_of(file.digest)
                if stored[0] is not None and not whole_at_rest:
                    raise
                if not whole_at_rest and exc.found in found:
                    raise  # the same wrong bytes twice: they are the store's
                found.append(exc.found)
                # Whole at rest, or other bytes at every read: read again.
                why = f"the bytes read do not match its digest (read {exc.found})"
                raise retry.Failing(retry.Fault(why)) from None

        retry.retried(attempt, self.blob_url(file.digest), sleep=lambda s: time.sleep(s))

    def check_held(self, file: FileRecord) -> str | None:
        """Whether a blob the store holds with its recorded size has the right bytes: None
        when intact, else a one-line problem naming its URL. The storage's own SHA-256 where it
        keeps one (one HEAD on S3, for blobs uploaded in one PUT), else :meth:`check_blob`,
        which reads every byte (locally on a folder store). A size alone proves nothing."""
        stored = self.backend.stored_sha256(self.layout.blob(file.digest))
        if stored is None:
            return self.check_blob(file)
        if stored == hex_of(file.digest):
            return None
        url = self.blob_url(file.digest)
        return f"{url} is corrupt (expected {file.digest}; the store holds sha256:{stored})"

    # Unit records.

    def get_unit(self, key: str) -> UnitRecord | None:
        """The unit record stored for ``key``, or None."""
        data = self.backend.read(self.layout.unit(key), MAX_RECORD_BYTES)
        if data is None:
            return None
        what = f"{self.url}: unit {key}"
        record = UnitRecord.from_bytes(data, what)
        if record.key != key:
            raise StoreDataInvalid(f"{what} holds the record of {record.key}")
        return record

    def has_unit(self, key: str) -> bool:
        """Whether a unit record exists for ``key`` (not whether its blobs do)."""
        return self.backend.exists(self.layout.unit(key))

    def cached_units(
        self,
        keys: Iterable[str],
        *,
        repairing: bool = False,
        sound: Callable[[UnitRecord], bool] | None = None,
    ) -> dict[str, UnitRecord]:
        """The records of the units of ``keys`` the store has cached, by key: record stored and
        readable, every blob present (a unit whose blobs are gone is not cached).

        ``repairing`` (compile, which replaces what it cannot read): a record that cannot be read
        (malformed, not a regular file, or written before records had one canonical form) also
        counts as not cached, so its unit is compiled again and its record replaced; so does a
        record that is not ``sound`` (the engine's content rule,
        :meth:`~neuronbuild.engines.base.Engine.sound`: an entry with an empty artifact).

        Raises:
            StoreDataInvalid: without ``repairing`` (plan, doctor, status only read), a record
                that cannot be read: bad data is reported, never taken silently for a miss.
        """
        cached: dict[str, UnitRecord] = {}
        for key in keys:
            try:
                record = self.get_unit(key)
            except StoreDataInvalid:
                if not repairing:
                    raise
                continue
            if record is None or (sound is not None and not sound(record)):
                continue
            if not self.missing_blobs(record.files):
                cached[key] = record
        return cached

    def put_unit(
        self, record: UnitRecord, sound: Callable[[UnitRecord], bool] | None = None
    ) -> UnitRecord:
        """Publish ``record`` after checking its blobs are present. The first record for a key
        wins and a later builder adopts (and returns) it, unless its blobs are gone, it cannot
        be read as a record, or it is not ``sound`` (see :meth:`cached_units`): then this build
        repairs it by replacing it.

        Raises:
            UserError: the record is larger than readers take (:data:`MAX_RECORD_BYTES`: the
                unit wrote too many files); nothing is written.
            StoreError: a blob of ``record`` is missing.
        """
        data = record.to_bytes()
        if len(data) > MAX_RECORD_BYTES:
            raise UserError(
                f"unit {record.key} has a record of {len(data)} bytes "
                f"({count(len(record.files), 'file')}), "
                f"over the {MAX_RECORD_BYTES} a store's readers take; nothing was published: "
                "split its graphs across more buckets or report the engine's output"
            )
        missing = self.missing_blobs(record.files)
        if missing:
            raise StoreError(f"{self.url}: unit {record.key} lacks blobs for {missing[0].path}")
        path = self.layout.unit(record.key)
        if self.backend.create(path, data):
            return record
        try:
            stored = self.get_unit(record.key)
        except StoreDataInvalid:  # unreadable or hostile: this build repairs it
            stored = None
        if stored is None or self.missing_blobs(stored.files) or (sound and not sound(stored)):
            self.backend.put(path, data)
            return record
        return stored

    def unit_keys(self) -> list[str]:
        """The keys of every unit record the store holds (a stray object's name is left out)."""
        paths = self.backend.find(self.layout.folder("units"))
        return [k for p in paths if (k := self.layout.digest_of("units", p)) is not None]

    def get_units(self, keys: Iterable[str], workers: int = 16) -> dict[str, UnitRecord]:
        """The unit records stored for ``keys``, read concurrently (those absent are left
        out): one request each, so a plan of 1,000 units is read in 1,000 / ``workers`` rounds."""
        unique = list(dict.fromkeys(keys))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            found = list(pool.map(self.get_unit, unique))
        return {k: r for k, r in zip(unique, found, strict=True) if r is not None}

    # Timings.

    def put_timing(self, timing: UnitTiming) -> None:
        """Record how long a unit took (the last measurement of a key wins). A measurement
        readers would refuse (over :data:`~neuronbuild.store.records.MAX_TIMING_SECONDS`) is not
        recorded: the unit's cost stays unmeasured rather than making ``timings`` fail."""
        if not 0 <= timing.seconds <= MAX_TIMING_SECONDS:
            return
        self.backend.put(self.layout.timing(timing.shape, timing.key), timing.to_bytes())

    def put_layout_record(self, digest: str, root: str) -> None:
        """Record that the folder ``root`` holds manifest ``digest`` laid out for vLLM (``ls``,
        ``status`` and ``gc`` read it; a later record of the same manifest replaces it).

        Raises:
            StoreError, OSError: the store refused the write.
        """
        record = canonical_json({"manifest": digest, "root": root})
        self.backend.put(self.layout.layout_record(digest), record)

    def timings(self, shapes: Iterable[str], workers: int = 16) -> list[UnitTiming]:
        """Every timing stored for one of ``shapes``: one listing of ``timings/``, then a read
        of each matching object (stray objects skipped).

        Raises:
            StoreDataInvalid: a matching timing is malformed or filed under another name.
        """
        wanted = set(shapes)
        paths = []
        for path in self.backend.find(self.layout.folder("timings")):
            named = self.layout.timing_of(path)
            if named is not None and named[0] in wanted:
                paths.append((path, named))

        def read(item: tuple[str, tuple[str, str]]) -> UnitTiming | None:
            path, (shape, key) = item
            data = self.backend.read(path, MAX_SMALL_BYTES)
            if data is None:
                return None
            timing = UnitTiming.from_bytes(data, f"{self.url}: timing {path}")
            if (timing.shape, timing.key) != (shape, key):
                raise StoreDataInvalid(f"{self.url}: timing {path} holds another unit's time")
            return timing

        with ThreadPoolExecutor(max_workers=workers) as pool:
            return [t for t in pool.map(read, paths) if t is not None]

    # Manifests.

    def put_manifest(self, manifest: Manifest) -> str:
        """Seal ``manifest``: check it is no larger than readers take (:data:`MAX_RECORD_BYTES`)
        and every unit record and blob is present, then write it under its own digest
        (exclusive create). Returns ``sha256:<hex>``.

        Raises:
            UserError: the manifest is over the cap (nothing is written: every ``serve``,
                ``verify`` and ``gc`` would refuse it). StoreError: a unit or blob is missing.
        """
        data = manifest.to_bytes()
        if len(data) > MAX_RECORD_BYTES:
            raise UserError(
                f"recipe {manifest.name} yields a manifest of {len(data)} bytes, over the "
                f"{MAX_RECORD_BYTES} a store's readers take; nothing was sealed: cut the build "
                "(fewer buckets) or split the recipe"
            )
        with ThreadPoolExecutor(max_workers=16) as pool:
            present = list(pool.map(self.has_unit, [u.key for u in manifest.units]))
        for unit, there in zip(manifest.units, present, strict=True):
            if not there:
                raise StoreError(
                    f"{self.url}: cannot seal, unit {unit.key} is not published; "
                    "compile (or push) the recipe again"
                )
        missing = self.missing_blobs(manifest.files())
        if missing:
            raise StoreError(
                f"{self.url}: cannot seal, the blob of {missing[0].path} is missing; "
                "compile (or push) the recipe again"
            )
        digest = manifest.digest
        self.backend.create(self.layout.manifest(digest), data)
        return digest

    def has_manifest(self, digest: str) -> bool:
        """Whether the manifest ``digest`` is stored (not whether it is sound)."""
        return self.backend.exists(self.layout.manifest(digest))

    def get_manifest(self, digest: str) -> Manifest:
        """The manifest named ``digest`` (bytes verified against it).

        Raises:
            UserError: no such manifest in this store.
            StoreDataInvalid: it is malformed, hostile or does not match its name.
        """
        data = self.backend.read(self.layout.manifest(digest), MAX_RECORD_BYTES)
        if data is None and self.is_index(digest):
            listed = ", ".join(short(d) for d in self.get_index(digest).manifests())
            raise UserError(
                f"{self.url}: {digest} is an index of builds (one per target, release or "
                f"instruction set), not one build; name one of its manifests: {listed}"
            )
        if data is None:
            raise UserError(f"{self.url}: no manifest {digest}")
        return Manifest.from_bytes(data, f"{self.url}: manifest {digest}", digest)

    def delete_manifest(self, digest: str) -> None:
        """Remove a manifest (a corrupt copy in a local tier, before copying it again)."""
        self.backend.delete(self.layout.manifest(digest))

    def manifest_digests(self) -> list[str]:
        """Every manifest digest the store holds (stray objects under ``manifests/`` skipped)."""
        paths = self.backend.find(self.layout.folder("manifests"))
        found = (self.layout.digest_of("manifests", p) for p in paths)
        return [d for d in found if d is not None]

    # Indexes (neuronbuild.store.index).

    def put_index(self, index: Index) -> str:
        """Write ``index`` under its own digest (exclusive create) once every entry's manifest is
        in this store; returns ``sha256:<hex>``.

        Raises:
            UserError: a reader would refuse it (a label no store record may hold; nothing is
                written). StoreError: an entry's manifest is missing (push or seal it first).
        """
        data = index.to_bytes()
        try:  # what every reader will take, or nothing is written
            Index.from_bytes(data, f"index of {index.name}")
        except StoreDataInvalid as exc:
            raise UserError(f"{exc}; nothing was written") from None
        for digest in index.manifests():
            if not self.has_manifest(digest):
                raise StoreError(f"{self.url}: cannot write the index, {digest} is missing")
        digest = index.digest
        self.backend.create(self.layout.index(digest), data)
        return digest

    def is_index(self, digest: str) -> bool:
        """Whether ``digest`` names an index stored here (not whether it is sound)."""
        return self.backend.exists(self.layout.index(digest))

    def get_index(self, digest: str) -> Index:
        """The index named ``digest`` (bytes verified against it).

        Raises:
            UserError: no such index. StoreDataInvalid: malformed, hostile or misnamed.
        """
        data = self.backend.read(self.layout.index(digest), MAX_RECORD_BYTES)
        if data is None:
            raise UserError(f"{self.url}: no index {digest}")
        return Index.from_bytes(data, f"{self.url}: index {digest}", digest)

    def index_digests(self) -> list[str]:
        """Every index digest the store holds (stray objects under ``indexes/`` skipped)."""
        paths = self.backend.find(self.layout.folder("indexes"))
        found = (self.layout.digest_of("indexes", p) for p in paths)
        return [d for d in found if d is not None]

    def manifests_of(self, digest: str) -> list[str]:
        """The manifests a ref value names: ``digest`` itself for a manifest, every entry's for
        an index (what gc keeps, push copies and verify checks for it).

        Raises:
            StoreDataInvalid: a malformed index.
        """
        return self.get_index(digest).manifests() if self.is_index(digest) else [digest]

    def build_for(self, digest: str, labels: dict[str, Any]) -> str | None:
        """The build a ref value holds for a recipe whose builds are labelled ``labels``
        (:func:`~neuronbuild.engines.registry.machine_labels`): ``digest`` itself for a manifest;
        for an index, its entry with exactly those labels, None when it has none (what
        ``compile`` seeds from, ``doctor`` compares with and the kit checks).

        Raises:
            StoreDataInvalid: a malformed index.
        """
        if not self.is_index(digest):
            return digest
        return self.get_index(digest).build_labelled(labels)

    # Attestations.

    def put_attestation(self, manifest: str, keyid: str, data: bytes) -> None:
        """Store ``data`` (a DSSE envelope, see :mod:`neuronbuild.attest`) as the attestation
        of ``manifest`` by key ``keyid``, atomically; a later one by the same key replaces it.

        Raises:
            UserError: ``data`` is over :data:`MAX_ATTESTATION_BYTES` (readers would refuse it),
                or the manifest is not in this store. StoreError: the write failed.
        """
        self._check_beside(manifest, data, "the attestation of", "attest", "signed")
        self.backend.put(self.layout.attestation(manifest, keyid), data)

    def _check_beside(self, manifest: str, data: bytes, what: str, verb: str, done: str) -> None:
        """Refuse to store ``data`` beside ``manifest`` (an attestation, an addition) when it is
        over :data:`MAX_ATTESTATION_BYTES` (readers would refuse it) or the manifest is not here.

        Raises:
            UserError: ``<what> <manifest> is N bytes, ...; nothing was <done>`` or ``no manifest
                <manifest> to <verb>``.
        """
        if len(data) > MAX_ATTESTATION_BYTES:
            raise UserError(
                f"{what} {manifest} is {len(data)} bytes, over the "
                f"{MAX_ATTESTATION_BYTES} a store's readers take; nothing was {done}"
            )
        if not self.has_manifest(manifest):
            raise UserError(f"{self.url}: no manifest {manifest} to {verb}")

    def attestation_paths(self, manifest: str) -> dict[str, str]:
        """The attestations of ``manifest`` this store holds: keyid -> path (one listing;
        stray names under its folder skipped).

        Raises:
            StoreDataInvalid: over :data:`MAX_ATTESTATIONS` of them, or (folder stores) a
                symbolic link where an attestation or its folder should be.
        """
        folder = self.layout.attestations(manifest)
        return self._beside(manifest, folder, self.layout.attestation_of, "attestations")

    def _beside(
        self,
        manifest: str,
        folder: str,
        named: Callable[[str], tuple[str, str] | None],
        what: str,
    ) -> dict[str, str]:
        """The objects of ``manifest`` in its ``folder`` (attestations or additions), by the name
        ``named`` reads from each path; at most :data:`MAX_ATTESTATIONS` (MAX_ADDITIONS)."""
        if self.is_folder and os.path.islink(folder):
            raise StoreDataInvalid(f"{self.url_of(folder)}: a symbolic link, not a folder")
        found: dict[str, str] = {}
        for path in self.backend.find(folder):
            pair = named(path)
            if pair is None or pair[0] != manifest:
                continue
            if self.is_folder and os.path.islink(path):
                raise StoreDataInvalid(f"{self.url_of(path)}: a symbolic link, not a file")
            found[pair[1]] = path
        most = MAX_ATTESTATIONS if what == "attestations" else MAX_ADDITIONS
        if len(found) > most:
            raise StoreDataInvalid(f"{self.url_of(folder)}: {len(found)} {what}, over {most}")
        return found

    def get_attestations(self, manifest: str) -> dict[str, bytes]:
        """The bytes of each attestation of ``manifest``, by the keyid its name claims (bytes
        unparsed and untrusted: :func:`neuronbuild.attest.envelope.read_attestation` parses).

        Raises:
            StoreDataInvalid: see :meth:`attestation_paths`; an attestation that is not a
                regular file (a FIFO is opened without blocking, then refused) or is over
                :data:`MAX_ATTESTATION_BYTES`.
        """
        return self._read_all(self.attestation_paths(manifest))

    def _read_all(self, paths: dict[str, str]) -> dict[str, bytes]:
        out = {}
        for name, path in paths.items():
            data = self.backend.read(path, MAX_ATTESTATION_BYTES)
            if data is not None:
                out[name] = data
        return out

    # Additions (neuronbuild.attest.additions).

    def put_addition(self, manifest: str, name: str, data: bytes) -> None:
        """Store ``data`` (an addition's DSSE envelope) as addition ``name`` of ``manifest``,
        atomically. Its files' blobs must be stored first: a reader takes the object for a
        complete addition.

        Raises:
            UserError: ``data`` is over :data:`MAX_ATTESTATION_BYTES`, the manifest is not in
                this store, or holds :data:`MAX_ADDITIONS` already. StoreError: the write failed.
        """
        self._check_beside(manifest, data, "the addition to", "add to", "published")
        folder = self.layout.additions(manifest)
        held = self._beside(manifest, folder, self.layout.addition_of, "additions")
        if len(held) >= MAX_ADDITIONS and name not in held:
            raise UserError(
                f"{self.url}: manifest {manifest} holds {len(held)} additions, as many as a "
                "reader takes; run gc (it keeps the newest of each node identity) and capture "
                "again"
            )
        self.backend.put(self.layout.addition(manifest, name), data)

    def get_additions(self, manifest: str) -> dict[str, bytes]:
        """The bytes of each addition of ``manifest``, by the name its path claims (unparsed
        and untrusted: :func:`neuronbuild.attest.additions.read_addition` parses).

        Raises:
            StoreDataInvalid: over :data:`MAX_ADDITIONS` of them, a symbolic link (folder
                stores), an object that is not a regular file or is over
                :data:`MAX_ATTESTATION_BYTES`.
        """
        folder = self.layout.additions(manifest)
        return self._read_all(self._beside(manifest, folder, self.layout.addition_of, "additions"))

    # Probes and receipts (neuronbuild.node.probe, neuronbuild.attest.receipts).

    def put_probe(self, manifest: str, data: bytes, *, replace: bool = False) -> None:
        """Store ``data`` as the answers CI recorded for ``manifest``: created once (the same
        bytes again are a no-op); ``replace`` overwrites other answers recorded before.

        Raises:
            UserError: ``data`` is over :data:`MAX_ATTESTATION_BYTES`, the manifest is not in
                this store, or other answers are recorded for it (without ``replace``).
            StoreError: the write failed.
        """
        self._check_beside(manifest, data, "the probe of", "probe", "recorded")
        path = self.layout.probe(manifest)
        if replace:
            self.backend.put(path, data)
        elif not self.backend.create(path, data) and self.get_probe(manifest) != data:
            raise UserError(
                f"{self.url}: other answers are recorded for {manifest} already, which every "
                "node probes against; pass --force to replace them"
            )

    def get_probe(self, manifest: str) -> bytes | None:
        """The bytes of the answers recorded for ``manifest`` (unparsed), or None.

        Raises:
            StoreDataInvalid: over :data:`MAX_ATTESTATION_BYTES`. StoreError: the read failed.
        """
        return self.backend.read(self.layout.probe(manifest), MAX_ATTESTATION_BYTES)

    def put_receipt(self, manifest: str, data: bytes) -> str:
        """Store ``data`` (a node's receipt) beside ``manifest``, named by its digest; returns
        the name.

        Raises:
            UserError: ``data`` is over :data:`MAX_ATTESTATION_BYTES`, or the manifest is not in
                this store. StoreError: the write failed.
        """
        self._check_beside(manifest, data, "the receipt of", "receipt", "written")
        name = sha256_digest(data)
        self.backend.put(self.layout.receipt(manifest, name), data)
        return name

    def receipt_names(self, manifest: str) -> list[str]:
        """The names of the receipts of ``manifest`` this store holds (one listing), sorted."""
        folder = self.layout.receipts(manifest)
        named = (self.layout.receipt_of(p) for p in self.backend.find(folder))
        return sorted(pair[1] for pair in named if pair is not None and pair[0] == manifest)

    # Refs.

    def get_ref(self, name: str, tag: str) -> str | None:
        """The manifest (or index) digest ``<name>/<tag>`` points at, or None."""
        data = self.backend.read(self.layout.ref(name, tag), MAX_SMALL_BYTES)
        if data is None:
            return None
        return check_digest(data.decode(errors="replace").strip(), f"ref {name}/{tag}")

    def move_ref(
        self,
        name: str,
        tag: str,
        digest: str,
        expected: str | None,
        check: Callable[[str | None], None] | None = None,
    ) -> str | None:
        """Point ``<name>/<tag>`` at ``digest`` (a manifest, or an index whose every build is
        here and not condemned) if it still points at ``expected`` (None: absent),
        by compare-and-swap; returns the value it replaced (``expected``; equal to ``digest``
        when the ref was there already and nothing moved).

        ``check`` (a caller's policy, :mod:`neuronbuild.store.moves`) is called with the value
        read for the swap, before anything is written, and refuses the move by raising.

        The move's history entry (its intent) is written first; then the manifest is refused if
        a gc run has condemned it (a marker younger than :data:`CONDEMNED_SECONDS` by the
        store's clock than the intent) or if it is missing, in that order; then the ref is
        swapped. gc writes its markers before it reads the intents and deletes only after, and
        removes a marker only after its manifest is gone or spared: so either gc sees the intent
        and keeps the manifest, or this move sees the marker (or the manifest gone) and fails
        cleanly. A crash in between leaves an entry of a move that never happened, which
        :meth:`ref_history` skips, never a move without its entry (see
        :mod:`neuronbuild.store.gc`). A swap the store refused outright (``StoreError.refused``:
        no permission, a read-only file system) removes its entry where the ref, read again,
        does not hold ``digest``; any other failure may have moved the ref (its answer lost, or
        applied late) and keeps it.

        Raises:
            RefConflict: the ref points elsewhere (another builder moved it first).
            StoreError: ``digest`` is not a manifest of this store, or gc is deleting it.
        """
        path = self.layout.ref(name, tag)
        data, token = self.backend.read_versioned(path, MAX_SMALL_BYTES)
        current = None if data is None else data.decode(errors="replace").strip()
        if current != expected:
            raise RefConflict(f"{name}/{tag} points at {current}, not {expected}")
        if current == digest:
            return current
        if check is not None:
            check(current)
        move = RefMove(time.time(), digest, current)
        intent = self.layout.history_entry(name, tag, time.time_ns(), digest)
        self.backend.create(intent, move.to_bytes())
        refusal = None
        if self._condemned(digest, intent):
            refusal = f"gc is sweeping {digest}; retry"
        elif (entries := self._unmovable_entries(digest, intent)) is not None:
            refusal = entries
        if refusal is not None:
            self._forget(intent)
            raise StoreError(f"{self.url}: {name}/{tag}: {refusal}")
        try:
            self.backend.swap(path, (digest + "\n").encode(), token)
        except SwapConflict:
            self._forget(intent)
            raise RefConflict(f"{name}/{tag} moved while moving it to {digest}") from None
        except StoreError as exc:
            # Refused outright (an unwritable refs/), it took no effect: its entry goes once a
            # read of the ref agrees. Any other failure may have landed (its answer lost, or
            # applied late): its entry stays, off the chain if the ref did not move.
            with contextlib.suppress(StoreError, UserError):
                if exc.refused and self.get_ref(name, tag) != digest:
                    self._forget(intent)
            raise
        if self.backend.settle_seconds:
            self._check_landed(name, tag, intent)
        return current

    def _check_landed(self, name: str, tag: str, intent: str) -> None:
        """On a store without compare-and-swap
        (:attr:`~neuronbuild.transports.backends.Backend.settle_seconds`): after waiting that long,
        check the move whose history entry is ``intent`` is on the ref's chain, so a move another
        writer overwrote (both read the same ref before either wrote) is reported, not taken for one
        that landed. A racer slower than the wait is not seen (the registry's limit, stated in
        :mod:`neuronbuild.store.oci`).

        Raises:
            RefConflict: the move is not on the chain (it was overwritten).
        """
        time.sleep(self.backend.settle_seconds)
        chain, _ = self.ref_chain(name, tag)
        if not any(path == intent for path, _ in chain):
            self._forget(intent)
            raise RefConflict(
                f"{name}/{tag}: another writer overwrote this move (the registry has no "
                "compare-and-swap); retry"
            )

    def _condemned(self, digest: str, intent: str) -> bool:
        """Whether a gc run's marker on ``digest`` holds: written less than
        :data:`CONDEMNED_SECONDS` before ``intent`` by the store's clock (an unknown time holds)."""
        markers = self.backend.find(self.layout.condemned(digest))
        if not markers:
            return False
        written = self.backend.modified(intent)
        for marker in markers:
            since = self.backend.modified(marker)
            if since is not None and written is not None and written - since >= CONDEMNED_SECONDS:
                continue  # left by a gc killed long ago
            if since is not None or self.backend.exists(marker):
                return True
        return False

    def _unmovable_entries(self, digest: str, intent: str) -> str | None:
        """Why a ref may not move to ``digest``: not a manifest or index here, or (an index)
        an entry's manifest missing or condemned by gc (see :meth:`move_ref`); None if it may."""
        if self.has_manifest(digest):
            return None
        if not self.is_index(digest):
            return f"unknown manifest {digest}"
        try:
            entries = self.get_index(digest).manifests()
        except StoreDataInvalid as exc:
            return str(exc)
        for entry in entries:
            if self._condemned(entry, intent):
                return f"gc is sweeping {entry}; retry"
            if not self.has_manifest(entry):
                return f"the index's manifest {entry} is missing"
        return None

    def _forget(self, intent: str) -> None:
        """Best effort: remove the history entry of a move that did not happen (readers skip it
        anyway)."""
        with contextlib.suppress(StoreError, UserError):
            self.backend.delete(intent)

    def set_ref(
        self,
        name: str,
        tag: str,
        digest: str,
        attempts: int = 5,
        check: Callable[[str | None], None] | None = None,
    ) -> str | None:
        """Move ``<name>/<tag>`` to ``digest`` by compare-and-swap, re-reading and retrying when
        another writer moved it in between (the last writer wins, no move is lost from history);
        returns the value it replaced (None: the ref is new). ``check``: as :meth:`move_ref`
        takes it, called again on each try with the value that try swaps from.

        Raises:
            RefConflict: still contended after ``attempts`` tries.
        """
        return retry.retried(
            lambda: self.move_ref(name, tag, digest, self.get_ref(name, tag), check),
            "",  # a conflict names its ref
            attempts=attempts,
            give_up=lambda fault, waited, refused: RefConflict(fault.reason),
            sleep=lambda seconds: time.sleep(seconds),
            pace=lambda attempt: 0.05 * (attempt - 1),  # writers contend, nothing is down
            fault_of=lambda exc: retry.Fault(str(exc)) if isinstance(exc, RefConflict) else None,
        )

    def refs(self) -> dict[str, str]:
        """Every ref ``<name>/<tag>`` and the manifest (or index) it points at."""
        out = {}
        for path in self.backend.find(self.layout.folder("refs")):
            parsed = self.layout.ref_of(path)
            if parsed is not None:
                digest = self.get_ref(*parsed)
                if digest is not None:
                    out["/".join(parsed)] = digest
        return out

    def history_entries(self, name: str, tag: str) -> list[tuple[str, RefMove]]:
        """Every history object of ``<name>/<tag>`` with its path, oldest first by the store's
        clock (the modification times it reports: the file system's, S3's server's; the name,
        which holds the writer's clock, breaks ties only), including entries of moves that never
        happened. One listing, then one read per entry."""
        times = self.backend.list_modified(self.layout.history(name, tag))
        moves = []
        for path in sorted(times, key=lambda p: (times[p] or 0.0, p)):
            data = self.backend.read(path, MAX_SMALL_BYTES)
            if data is not None:
                what = f"{self.url}: ref history {path}"
                moves.append((path, RefMove.from_bytes(data, what)))
        return moves

    def ref_chain(self, name: str, tag: str) -> tuple[list[tuple[str, RefMove]], list[str]]:
        """The moves of ``<name>/<tag>`` that happened, oldest first, with their paths, and the
        paths of entries of moves that never happened.

        The chain is walked back from where the ref points now by ``previous`` links alone: the
        newest entry naming that manifest, then the newest other one naming its ``previous``,
        and so on, wherever they sort ("newest" by the store's clock, :meth:`history_entries`,
        decides only between entries naming one manifest, A -> B -> A; so a writer whose clock
        is slow, which names its entry early, still lands on the chain). An entry off the
        chain was written by a writer that failed or died before moving the ref. Where no older
        entry names the manifest wanted, the ref got there without a recorded move (written by
        hand, or by a version that kept no history) and the walk resumes at the next entry.
        """
        chain, off = self.walk_chain(self.get_ref(name, tag), self.history_entries(name, tag))
        return chain, [path for path, _ in off]

    @staticmethod
    def walk_chain(
        want: str | None, entries: list[tuple[str, RefMove]]
    ) -> tuple[list[tuple[str, RefMove]], list[tuple[str, RefMove]]]:
        """:meth:`ref_chain`'s walk back from manifest ``want`` (None: an absent ref) through
        ``entries`` (oldest first, as :meth:`history_entries` gives them): the entries on the
        chain and those off it, each oldest first."""
        newest_first = entries[::-1]
        left = list(range(len(newest_first)))  # off the chain so far
        walked: list[int] = []
        while want is not None and left:
            named = [i for i in left if newest_first[i][1].manifest == want]
            older = [i for i in left if not walked or i > walked[-1]]
            if not named and not older:
                break
            # No entry names it: the ref got there without a recorded move (a gap).
            i = named[0] if named else older[0]
            walked.append(i)
            left.remove(i)
            want = newest_first[i][1].previous
        return [newest_first[i] for i in walked][::-1], [newest_first[i] for i in left][::-1]

    def ref_history(self, name: str, tag: str) -> list[RefMove]:
        """Every move of ``<name>/<tag>`` that happened, oldest first (see :meth:`ref_chain`)."""
        return [move for _, move in self.ref_chain(name, tag)[0]]

    def overview(self) -> dict[str, Any]:
        """The store's URL, refs, and the counts of :meth:`summary` (``ls`` and ``status``)."""
        return {"store": self.url, "refs": self.refs(), **self.summary()}

    def summary(self) -> dict[str, int]:
        """Counts (``n_manifests``, ``n_unit_records``, ``n_blobs``, ``n_layouts``) and the
        blobs' ``bytes``."""
        blobs = self.backend.list_sizes(self.layout.folder("blobs"))
        return {
            "n_manifests": len(self.backend.find(self.layout.folder("manifests"))),
            "n_unit_records": len(self.backend.find(self.layout.folder("units"))),
            "n_blobs": len(blobs),
            "bytes": sum(blobs.values()),
            "n_layouts": len(self.backend.find(self.layout.folder("layouts"))),
        }

    def listing(self) -> Listing:
        """How :mod:`~neuronbuild.store.names` reads this store's refs and manifests."""
        return Listing(
            self.get_ref,
            lambda: sorted(self.refs()),
            lambda: self.manifest_digests() + self.index_digests(),
            self.url,
        )

    def resolve_target(self, text: str, accept: Accept = "any") -> Target:
        """The manifest ``text`` names, and the ref it came through, read as ``accept`` says
        (see :func:`~neuronbuild.store.names.resolve`).

        Raises:
            UserError: nothing matches (the refs that exist are named), a prefix is ambiguous or
                too short, or the text is neither a ref nor a digest.
        """
        return resolve(self.listing(), text, accept)

    def resolve(self, text: str) -> str:
        """The manifest digest ``text`` names (see :meth:`resolve_target`)."""
        return self.resolve_target(text).digest


def store_now(store: Store, *, dry_run: bool = False) -> float:
    """The store's clock (seconds since the epoch): the modification time of a probe object
    written under ``tmp/`` and deleted (a folder's file system's time, S3's server's time).
    This host's clock where the store keeps no times, and in a dry run, which writes nothing (so
    a dry run on a host whose clock is skewed may list what a real run keeps, or the reverse).

    Raises:
        StoreError: the probe could not be written (outside a dry run).
    """
    if dry_run:
        return time.time()
    when = store.backend.probe(store.layout.tmp(f"clock-{uuid.uuid4().hex}"))
    return time.time() if when is None else when


def _stat_key(path: Path) -> tuple[int, int, int]:
    """A file's (size in bytes, mtime in ns, inode): what a verified blob must keep to be
    trusted without reading it again."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino
