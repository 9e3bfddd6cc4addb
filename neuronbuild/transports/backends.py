"""Storage backends: bounded reads and atomic writes on one fsspec file system, the only place
that knows which one it is. A backend knows keys (paths under its root), never the store's layout:
the store hands it the two names it writes besides them (:class:`Places`). Only the store
(:mod:`neuronbuild.store`) and the scheme table (:mod:`.schemes`) import this module.

The store needs four writes: replace an object atomically, create one only if absent (the first
unit record or manifest wins), upload a local file atomically, and compare-and-swap (moving a
ref). Folders (local disks, NFS) get them from a temporary file the store names renamed
or hard-linked into place and a file lock; S3 from conditional requests (``If-None-Match: *``,
``If-Match: <ETag>``) through s3fs; OCI registries (``oci://``, :mod:`neuronbuild.store.oci`,
a backend of its own outside fsspec) by check, write and read-after-write, the strongest the
distribution API allows (it says what that guarantees). Other fsspec URLs are read-only unless
the user opts into last-writer-wins, where create and swap are check-then-write and may race.
Reads take regular files only, and never more bytes than the caller's limit: a named pipe, a
device or an oversized object in a shared store is bad store data, not a hang.
"""

from __future__ import annotations

import base64
import contextlib
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol, cast

import fsspec
from filelock import FileLock, Timeout
from fsspec import AbstractFileSystem
from fsspec.callbacks import Callback

from neuronbuild import envs
from neuronbuild.errors import NO_ROOM_ERRNOS, NoRoom, StoreDataInvalid, StoreError, UserError
from neuronbuild.transports import retry
from neuronbuild.transports.ranged import RangedReads
from neuronbuild.transports.retry import body_retried, watch_s3
from neuronbuild.transports.s3_fast import LazyFastS3
from neuronbuild.user_files import Unreadable, open_regular

OnBytes = Callable[[int], None]
"""Told the length of each chunk an upload sends (a progress bar)."""


class _Counted(Callback):  # type: ignore[misc]  # fsspec ships no types
    """fsspec's transfer callback, passing each increment to an :data:`OnBytes`."""

    def __init__(self, on_bytes: OnBytes | None) -> None:
        super().__init__()
        self.on_bytes = on_bytes

    def relative_update(self, inc: int = 1) -> None:
        super().relative_update(inc)
        if self.on_bytes is not None:
            self.on_bytes(inc)

    def absolute_update(self, value: int) -> None:
        self.relative_update(value - self.value)


class SwapConflict(StoreError):
    """A compare-and-swap found another version than expected."""


def _is_precondition_failure(exc: BaseException) -> bool:
    """Whether an s3fs error is S3's 412 Precondition Failed (a refused conditional write;
    s3fs raises FileExistsError for some)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, FileExistsError):
            return True
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
                return True
        seen = seen.__cause__ or seen.__context__
    return "pre-conditions you specified did not hold" in str(exc)


SWAPPED_BYTES = 4096
"""Largest object a compare-and-swap or conditional delete reads back to compare (bytes): the
store swaps only refs and leases, each under its layout's ``MAX_SMALL_BYTES`` (equal)."""


class Places(Protocol):
    """The names a backend writes besides the store's keys, which the store's layout
    (:class:`~neuronbuild.store.layout.Layout`) gives it: both under ``root``."""

    @property
    def root(self) -> str:
        """The store's root on its file system (no trailing ``/``)."""

    def tmp(self, name: str) -> str:
        """A temporary object named ``name``."""

    def ref_lock(self, ref_path: str) -> str:
        """The lock file of a compare-and-swap of ``ref_path``."""


PlacesAt = Callable[[str], Places]
"""The store's :class:`Places` at a root (the store passes its ``Layout`` class)."""


class Backend(ABC):
    """Reads and atomic writes under one root of one fsspec file system.

    Raises:
        StoreError: the file system failed (exit code 3); missing objects are reported as None.
    """

    rereads_mismatch = False
    """Whether a blob whose bytes did not match its digest may be read again and come whole
    (:meth:`~neuronbuild.store.cas.Store.fetch_blob`): on a network, where bytes can change in
    transit; never on a folder, whose bytes are the same at every read."""

    lists_blobs = True
    """Whether one listing of ``blobs/`` finds every blob (an OCI registry lists none: the
    presence of many blobs is then checked one request each)."""

    durable_blobs = True
    """Whether a blob moved into a folder store is fsynced (file and folder) before it counts as
    stored. ``serve``'s fetch into a node's local tier turns it off
    (:meth:`~neuronbuild.store.tiered.TieredStore.skip_blob_fsync`): its blobs are verified
    again after a reboot and a torn one fetched again, so a crash costs a fetch, never trust."""

    settle_seconds = 0.0
    """A store without compare-and-swap (an OCI registry): how long a ref move waits after its
    write before checking it is on the ref's history chain (0: the swap itself is atomic)."""

    def __init__(self, fs: AbstractFileSystem, places: Places, url: str) -> None:
        self.fs, self.places, self.url = fs, places, url
        self.root = places.root

    def check_root(self, create: bool) -> None:
        """Raise unless the store's root exists (``create``: make a missing folder root).

        Raises:
            StoreError: it does not exist or cannot be reached. UserError: it is a file.
        """
        with self._errors(f"cannot reach {self.url}"):
            if self.fs.isdir(self.root):
                return
            if self.fs.isfile(self.root):
                raise UserError(f"{self.url} is a file, not a store; give a folder or URL")
        raise StoreError(f"{self.url} does not exist; check the URL")

    def _too_big(self, path: str, limit: int) -> StoreDataInvalid:
        return StoreDataInvalid(f"{self.fs.unstrip_protocol(path)}: larger than {limit} bytes")

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except (FileNotFoundError, FileExistsError, StoreError, UserError):
            raise
        except RecursionError:  # a path nested deeper than the interpreter recurses
            raise StoreDataInvalid(f"{self.url}: {what}: nested too deeply") from None
        except OSError as exc:
            error = NoRoom.of(exc, self.url, what) or StoreError(
                f"{self.url}: {what}: {type(exc).__name__}: {exc}"
            )
            error.refused = isinstance(exc, PermissionError) or exc.errno in NO_ROOM_ERRNOS
            raise error from None
        except Exception as exc:  # s3fs/botocore raise their own types (no credentials, ...)
            raise StoreError(f"{self.url}: {what}: {type(exc).__name__}: {exc}") from None

    def read(self, path: str, limit: int) -> bytes | None:
        """The object's bytes (at most ``limit``), or None when it does not exist.

        Raises:
            StoreDataInvalid: not a regular file, or larger than ``limit`` bytes.
        """
        return self.read_versioned(path, limit)[0]

    def read_versioned(self, path: str, limit: int) -> tuple[bytes | None, Any]:
        """The object's bytes and a version token for :meth:`swap` (both None when absent)."""
        with self._errors(f"cannot read {path}"):
            try:
                info = self._fresh_info(path)
                if info.get("type", "file") != "file":
                    raise StoreDataInvalid(f"{self.fs.unstrip_protocol(path)}: not a file")
                if int(info.get("size") or 0) > limit:
                    raise self._too_big(path, limit)
                data = self._cat(path, limit + 1)
            except FileNotFoundError:
                return None, None
            if len(data) > limit:
                raise self._too_big(path, limit)
            return data, self._version(info, data)

    def _cat(self, path: str, end: int) -> bytes:
        return self.fs.cat_file(path, start=0, end=end)  # type: ignore[no-any-return]

    def _fresh_info(self, path: str) -> dict[str, Any]:
        return self.fs.info(path)  # type: ignore[no-any-return]

    def _version(self, info: dict[str, Any], data: bytes) -> Any:
        """The token :meth:`swap` compares: the bytes themselves, unless the system has one."""
        return data

    def size(self, path: str) -> int | None:
        """The object's size in bytes, or None when it does not exist."""
        with self._errors(f"cannot stat {path}"):
            try:
                return int(self.fs.size(path))
            except FileNotFoundError:
                return None

    def modified(self, path: str, fresh: bool = False) -> float | None:
        """The object's modification time (seconds since the epoch), or None when absent (or
        the file system keeps none); ``fresh``: asked of the store, never of a cached listing."""
        with self._errors(f"cannot stat {path}"):
            try:
                info = self._fresh_info(path) if fresh else self.fs.info(path)
            except FileNotFoundError:
                return None
        return _modified_of(info)

    def exists(self, path: str) -> bool:
        """Whether ``path`` is there now: asked of the store, never answered from a listing
        cached earlier (s3fs keeps one: a ref move must not see a manifest gc has deleted)."""
        with self._errors(f"cannot stat {path}"):
            try:
                self._fresh_info(path)
            except (FileNotFoundError, NotADirectoryError):  # as fsspec's exists answers
                return False
            return True

    def _listing(self, prefix: str) -> dict[str, dict[str, Any]]:
        """Every object under ``prefix`` (recursively) with its details, from one listing; no
        folder. s3fs's ``find`` answers a listing that came back empty with the prefix's own
        ``info``, which is a folder once another writer's first object under it has landed:
        that folder is no object (a FIFO or the like stays in, to be refused when read)."""
        with self._errors(f"cannot list {prefix}"):
            try:
                found = self.fs.find(prefix, detail=True)
            except FileNotFoundError:
                return {}
        return {str(p): info for p, info in found.items() if info.get("type") != "directory"}

    def find(self, prefix: str) -> list[str]:
        """Every object path under ``prefix`` (recursively), sorted; [] when there is none."""
        return sorted(self._listing(prefix))

    def list_sizes(self, prefix: str) -> dict[str, int]:
        """Every object path under ``prefix`` and its size in bytes."""
        return {p: int(info.get("size") or 0) for p, info in self._listing(prefix).items()}

    def list_modified(self, prefix: str) -> dict[str, float | None]:
        """Every object path under ``prefix`` and its modification time by the store's clock
        (seconds since the epoch; None where the file system keeps none), from one listing."""
        return {p: _modified_of(info) for p, info in self._listing(prefix).items()}

    def open_read(self, path: str, size: int | None = None) -> IO[bytes]:
        """A binary file object for reading a regular file (FileNotFoundError when absent;
        StoreDataInvalid for anything that is not a regular file). ``size``: the bytes the
        caller expects (its record's), which lets a backend skip asking for them; the caller
        still checks the bytes it reads."""
        self._file_info(path)
        return self.fs.open(path, "rb")  # type: ignore[no-any-return]

    def _file_info(self, path: str) -> dict[str, Any]:
        with self._errors(f"cannot read {path}"):
            info: dict[str, Any] = self.fs.info(path)
        if info.get("type") != "file":
            raise StoreDataInvalid(f"{self.fs.unstrip_protocol(path)}: not a file")
        return info

    def delete(self, path: str) -> None:
        with self._errors(f"cannot delete {path}"), contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(path)

    def stored_sha256(self, path: str) -> str | None:
        """The sha256 (hex) the storage itself computed of the object's bytes, or None where it
        keeps none (folders: reading the bytes is as cheap)."""
        return None

    def abort_abandoned_uploads(self, older_than: float, dry_run: bool) -> list[str]:
        """Abort unfinished multipart uploads under the root started before ``older_than``
        (seconds since the epoch); returns their keys. Only object stores have them."""
        return []

    @abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` atomically."""

    def check_writes_allowed(self) -> None:
        """Raise where this backend refuses every write (:class:`ReadOnly`); elsewhere nothing:
        what a dry run, which writes nothing, can know of a store's writes.

        Raises:
            UserError: writes are refused here (naming the opt-in that allows them).
        """

    def probe(self, path: str) -> float | None:
        """Write an empty probe object at ``path`` (a fresh temporary name), read its
        modification time and delete it: the store is writable, and that is its clock (seconds
        since the epoch; None where it keeps no times).

        Raises:
            StoreError: the write or the delete failed (a store that refuses deletes says
                which setting it needs). FileNotFoundError: the store's root is gone.
        """
        self.put(path, b"")
        try:
            return self.modified(path)
        finally:
            self.delete(path)

    @abstractmethod
    def create(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` unless it exists; True if this call created it."""

    @abstractmethod
    def put_file(self, local: str | Path, path: str, on_bytes: OnBytes | None = None) -> None:
        """Upload a local file to ``path`` atomically (readers see all of it or nothing);
        ``on_bytes`` is told the bytes sent as they go."""

    @abstractmethod
    def swap(self, path: str, data: bytes, token: Any) -> None:
        """Write ``data`` if ``path`` is still at version ``token`` (None: absent).

        Raises:
            SwapConflict: it changed in between.
        """

    def delete_if(self, path: str, token: Any) -> bool:
        """Delete ``path`` if it is still at version ``token`` (from :meth:`read_versioned`);
        True if this call deleted it. This base version reads, compares and deletes: another
        writer may change it in between (the last-writer-wins stores' race); folders and S3
        delete conditionally.

        Raises:
            StoreError: the file system failed.
        """
        if self.read_versioned(path, SWAPPED_BYTES)[1] != token:
            return False
        self.delete(path)
        return True


def _modified_of(info: dict[str, Any]) -> float | None:
    """An fsspec info's modification time: a folder's ``mtime``, S3's ``LastModified`` (the
    server's clock), seconds since the epoch; None when it has none."""
    value: Any = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(value) if value is not None else None


def _fsync_dir(path: str) -> None:
    """Persist a rename or link in ``path``'s folder, so a ref never outlives what it names."""
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_regular(path: str) -> int:
    """A read descriptor of ``path`` if it is a regular file
    (:func:`~neuronbuild.user_files.open_regular`: a named pipe is opened without blocking, then
    refused, like a device or a folder).

    Raises:
        StoreDataInvalid: it is no regular file. OSError: it cannot be opened (the caller tells
            a missing object from a fault).
    """
    try:
        return open_regular(path)
    except Unreadable:
        raise StoreDataInvalid(f"{path}: not a regular file") from None


class FolderBackend(Backend):
    """A local or NFS folder: temporary file + rename (replace) or hard link (create)."""

    def check_root(self, create: bool) -> None:
        if create and not os.path.lexists(self.root):
            try:
                os.makedirs(self.root, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"{self.url}: cannot create it: {exc.strerror}") from None
        if os.path.isdir(self.root):
            return
        if os.path.lexists(self.root):
            raise UserError(f"{self.url} is a file, not a store folder; give a folder")
        raise StoreError(
            f"{self.url} does not exist; check the path (a command that publishes creates it)"
        )

    def read_versioned(self, path: str, limit: int) -> tuple[bytes | None, Any]:
        with self._errors(f"cannot read {path}"):
            try:
                fd = _open_regular(path)
            except (FileNotFoundError, NotADirectoryError):
                return None, None
            with os.fdopen(fd, "rb") as f:
                data = f.read(limit + 1)
            if len(data) > limit:
                raise self._too_big(path, limit)
            return data, data

    def open_read(self, path: str, size: int | None = None) -> IO[bytes]:
        with self._errors(f"cannot read {path}"):
            return os.fdopen(_open_regular(path), "rb")

    @contextlib.contextmanager
    def _temp(self, data: bytes | None = None) -> Iterator[str]:
        tmp = self.places.tmp(f"{uuid.uuid4().hex}.part")
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        try:
            if data is not None:
                with open(tmp, "xb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            yield tmp
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def put(self, path: str, data: bytes) -> None:
        with self._errors(f"cannot write {path}"), self._temp(data) as tmp:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.replace(tmp, path)
            _fsync_dir(path)

    def create(self, path: str, data: bytes) -> bool:
        with self._errors(f"cannot write {path}"), self._temp(data) as tmp:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                os.link(tmp, path)
            except FileExistsError:
                # On NFS a LINK sent again after its reply was lost answers EEXIST although the
                # first made the link; the temporary file's link count tells (open(2), O_EXCL).
                if os.stat(tmp).st_nlink < 2:
                    return False
            _fsync_dir(path)
            return True

    def put_file(self, local: str | Path, path: str, on_bytes: OnBytes | None = None) -> None:
        with self._errors(f"cannot write {path}"), self._temp() as tmp:
            with open(local, "rb") as src, open(tmp, "xb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
                    if on_bytes is not None:
                        on_bytes(len(chunk))
                out.flush()
                os.fsync(out.fileno())
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.replace(tmp, path)
            _fsync_dir(path)

    def move_in(self, local: str | Path, path: str) -> None:
        """Rename a local file of the same file system into place (it is consumed)."""
        with self._errors(f"cannot write {path}"):
            if self.durable_blobs:
                with open(local, "rb") as f:
                    os.fsync(f.fileno())
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.replace(local, path)
            if self.durable_blobs:
                _fsync_dir(path)

    LOCK_SECONDS = 60.0
    """How long a compare-and-swap waits for another's lock of the same path."""

    @contextlib.contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        """Hold the lock :meth:`swap` and :meth:`delete_if` take on ``path``.

        Raises:
            StoreError: the lock cannot be made, or another holds it past :data:`LOCK_SECONDS`.
        """
        lock = self.places.ref_lock(path)
        held = FileLock(lock, timeout=self.LOCK_SECONDS)
        with self._errors(f"cannot lock {path}"):
            try:
                os.makedirs(os.path.dirname(lock), exist_ok=True)
                held.acquire()
            except Timeout:
                raise StoreError(
                    f"{self.url}: cannot lock {path}: {lock} held for over "
                    f"{self.LOCK_SECONDS:g} s (a stuck writer? delete the lock file if none runs)"
                ) from None
            except FileExistsError as exc:  # a file where the lock's folder goes
                raise StoreError(f"{self.url}: cannot lock {path}: {exc}") from None
        try:
            yield
        finally:
            with self._errors(f"cannot unlock {path}"):
                held.release()

    def swap(self, path: str, data: bytes, token: Any) -> None:
        with self._locked(path):
            current, _ = self.read_versioned(path, SWAPPED_BYTES)
            if current != token:
                raise SwapConflict(f"{path} changed while moving it")
            self.put(path, data)

    def delete_if(self, path: str, token: Any) -> bool:
        with self._locked(path):
            current, _ = self.read_versioned(path, SWAPPED_BYTES)
            if current is None or current != token:
                return False
            self.delete(path)
            return True


class _RetriedReads:
    """An s3fs file read with :func:`~neuronbuild.transports.retry.body_retried`: a read whose body
    breaks is read again from the same offset (s3fs moves its position only after a read
    succeeded)."""

    def __init__(self, file: IO[bytes], what: str) -> None:
        self.file, self.what = file, what

    def read(self, n: int = -1) -> bytes:
        at = self.file.tell()

        def attempt() -> bytes:
            self.file.seek(at)
            return self.file.read(n)

        return body_retried(attempt, self.what)

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> _RetriedReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connection_refused(exc: BaseException) -> bool:
    """Whether an s3fs/botocore error is a refused TCP connection (nothing listens there)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "Connection refused" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


_IGNORED_CONDITION: dict[tuple[str, str], str | None] = {}
"""By (endpoint, bucket): the conditional-write header the endpoint ignores, or None (probed)."""

SINGLE_PUT_BYTES = 100 << 20
"""Files below this many bytes go up in one PUT (s3fs: under twice its 50 MiB default part)."""

RANGED_MIN_BYTES = SINGLE_PUT_BYTES
"""Objects of this many bytes or more are read as concurrent ranged GETs. They went up in parts,
so S3 keeps no whole-object checksum a single GET could check on the way: nothing is lost by
reading them in parts (the bytes' sha256 is checked either way)."""


class ObjectBackend(Backend):
    """S3 through s3fs: every PUT is atomic; create and swap are conditional requests; each
    request is retried, with a line on stderr, by :mod:`neuronbuild.transports.retry`."""

    rereads_mismatch = True

    last_writer_wins = False
    """``--last-writer-wins``: where the endpoint ignores conditional writes, publish anyway
    (:meth:`_conditions_honoured`)."""

    def __init__(self, fs: AbstractFileSystem, places: Places, url: str) -> None:
        super().__init__(fs, places, url)
        with self._errors("cannot set up its S3 client"):
            watch_s3(fs)
        self.fast = LazyFastS3(fs, self.root.partition("/")[0])
        """Blob GETs' client (:mod:`neuronbuild.transports.s3_fast`, obstore), made on the first."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled in another process (a Ray task's), the file system gets a client of its
        # own, which must retry (and report) as this one does; obstore's is made there anew.
        self.__dict__.update(state)
        with self._errors("cannot set up its S3 client"):
            watch_s3(self.fs)

    def _cat(self, path: str, end: int) -> bytes:
        what = self.fs.unstrip_protocol(path)
        return body_retried(lambda: super(ObjectBackend, self)._cat(path, end), what)

    def open_read(self, path: str, size: int | None = None) -> IO[bytes]:
        """As the base's; an object of :data:`RANGED_MIN_BYTES` or more is read as concurrent
        ranged GETs (:class:`~neuronbuild.transports.ranged.RangedReads`), each retried as a whole
        request is. The bytes come through obstore (:mod:`neuronbuild.transports.s3_fast`: one
        streaming GET, or the ranged GETs) where it is installed, else through s3fs. The object's
        size comes from a HEAD (s3fs's), except where obstore reads an object expected (``size``)
        below :data:`RANGED_MIN_BYTES`: its one GET tells the size, a request less per blob.

        Raises:
            FileNotFoundError: no such object. StoreDataInvalid: not a regular object.
            StoreError: S3 failed (after the retries of :mod:`neuronbuild.transports.retry`).
        """
        fast = self.fast.get()
        what = self.fs.unstrip_protocol(path)
        key = path.partition("/")[2]
        if fast is not None and size is not None and size < RANGED_MIN_BYTES:
            return cast(IO[bytes], fast.open_stream(key, None, what))
        size = int(self._file_info(path).get("size") or 0)
        if size >= RANGED_MIN_BYTES:
            read_range: Callable[[int, int], bytes | memoryview]
            if fast is None:
                read_range = lambda start, end: self._range(path, start, end)  # noqa: E731
            else:
                read_range = lambda start, end: fast.read_range(key, start, end, what)  # noqa: E731
            return cast(IO[bytes], RangedReads(read_range, size))
        if fast is not None:
            return cast(IO[bytes], fast.open_stream(key, size, what))
        file = self.fs.open(path, "rb")
        return cast(IO[bytes], _RetriedReads(file, what))

    def _range(self, path: str, start: int, end: int) -> bytes:
        what = self.fs.unstrip_protocol(path)
        with self._errors(f"cannot read {path}"):
            return body_retried(lambda: bytes(self.fs.cat_file(path, start=start, end=end)), what)

    def _single_attempt(self) -> AbstractFileSystem:
        """A client of the same endpoint and credentials that tries each request once."""
        # total_max_attempts counts the first attempt; max_attempts (retries only) would be 2.
        retries = {"total_max_attempts": 1, "mode": "standard"}
        config = {**getattr(self.fs, "config_kwargs", {}), "retries": retries}
        probe = type(self.fs)(skip_instance_cache=True, config_kwargs=config)
        probe.retries = 1  # s3fs's own retry loop, around botocore's: off
        return probe

    def check_root(self, create: bool) -> None:
        bucket, _, prefix = self.root.partition("/")
        listing = {"Bucket": bucket, "Prefix": f"{prefix}/" if prefix else "", "MaxKeys": 1}
        # A listing, which the read-only IAM policy of the README allows (HeadBucket not); tried
        # once first, so an endpoint that refuses connections (an offline node) fails at once
        # instead of after ~15 s of retries, and a pulled local tier serves without waiting.
        try:
            self._single_attempt().call_s3("list_objects_v2", **listing)
            return
        except Exception as exc:
            if _connection_refused(exc):
                raise StoreError(
                    f"{self.url}: cannot reach bucket {bucket}: the endpoint refuses "
                    f"connections ({type(exc).__name__}: {exc})"
                ) from None
        try:
            self.fs.call_s3("list_objects_v2", **listing)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, FileNotFoundError) or "NoSuchBucket" in text:
                raise StoreError(f"{self.url}: bucket {bucket} does not exist") from None
            raise StoreError(f"{self.url}: cannot reach bucket {bucket}: {text}") from None

    def _fresh_info(self, path: str) -> dict[str, Any]:
        return self.fs.info(path, refresh=True)  # type: ignore[no-any-return]

    def _version(self, info: dict[str, Any], data: bytes) -> Any:
        return info.get("ETag")

    def put(self, path: str, data: bytes) -> None:
        with self._errors(f"cannot write {path}"):
            self.fs.pipe_file(path, data)

    def create(self, path: str, data: bytes) -> bool:
        if not self._conditions_honoured():
            return _create_unchecked(self, path, data)
        return self._put_if(path, data, mode="create")

    def probe(self, path: str) -> float | None:
        self._conditions_honoured()  # refused before any work, not at the first record
        return super().probe(path)

    def _conditions_honoured(self) -> bool:
        """Whether this endpoint honours ``If-None-Match: *`` and ``If-Match`` on PUT, probed
        once per endpoint and bucket in this process (:meth:`_ignored_condition`). False only
        where it ignores them and the user passed ``--last-writer-wins``: then create and swap
        check, then write, and may race.

        Raises:
            UserError: it ignores them (older MinIO, the JuiceFS gateway, s3gw), so the first
                record would not win and a ref move would not compare-and-swap; no
                ``--last-writer-wins``. StoreError: the probe could not write.
        """
        where = (str(getattr(self.fs, "endpoint_url", None)), self.root.partition("/")[0])
        if where not in _IGNORED_CONDITION:
            _IGNORED_CONDITION[where] = self._ignored_condition()
        ignored = _IGNORED_CONDITION[where]
        if ignored is None:
            return True
        if self.last_writer_wins:
            return False
        raise UserError(
            f"{self.url}: this S3 endpoint ignores {ignored} on PUT (a conditional write of the "
            "probe replaced it), so a first record would not win and a ref move would not "
            "compare-and-swap: use an endpoint that honours conditional writes, or pass "
            "--last-writer-wins to publish anyway (of two concurrent writers the last one wins)"
        )

    def _ignored_condition(self) -> str | None:
        """The conditional-write header this endpoint ignores (``If-None-Match``, ``If-Match``),
        or None: a create of a fresh private object under ``tmp/``, a create over it and a
        swap from a version it never had (both must be refused), then its delete."""
        path = self.places.tmp(f"conditions-{uuid.uuid4().hex}")
        try:
            self._put_if(path, b"0", mode="create")
            if self._put_if(path, b"1", mode="create"):
                return "If-None-Match"
            try:
                if self._put_if(path, b"2", IfMatch=f'"{"0" * 32}"'):
                    return "If-Match"
            except StoreError:  # answered by anything but 412 (501, 400): not honoured
                return "If-Match"
            return None
        finally:
            with contextlib.suppress(StoreError, UserError, OSError):
                self.delete(path)

    def _put_if(self, path: str, data: bytes, **condition: Any) -> bool:
        """PUT ``data`` at ``path`` if ``condition`` (s3fs's ``mode="create"``: If-None-Match,
        or ``IfMatch=<ETag>``) holds; False when S3 refused it (412).

        A PUT that lands but whose response is lost (a connection reset after the write) is
        retried by botocore and refused, or fails for good if the retries fail: either way the
        object is read back, and a write is this call's when ``path`` holds exactly ``data``.
        Equal bytes are the same outcome whoever wrote them: a unit record or manifest is named
        by what it holds, a history entry by its time in nanoseconds, and a ref another writer
        moved to the same manifest points where this move meant it to (its history holds two
        entries of that move, one on the chain and one off it, which readers skip).

        Raises:
            StoreError: the PUT failed and ``path`` does not hold ``data`` (or cannot be read).
        """
        with self._errors(f"cannot write {path}"):
            try:
                self.fs.pipe_file(path, data, **condition)
                return True
            except Exception as exc:
                refused = _is_precondition_failure(exc)
                try:
                    if self._cat(path, len(data) + 1) == data:
                        return True
                except FileNotFoundError:
                    pass
                except Exception:
                    if not refused:
                        raise exc from None  # the write's failure, not the read's
                    raise
                if refused:
                    return False
                raise

    def abort_abandoned_uploads(self, older_than: float, dry_run: bool) -> list[str]:
        bucket, _, prefix = self.root.partition("/")
        aborted = []
        with self._errors(f"cannot list multipart uploads of {self.url}"):
            listing = self.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix)
            for upload in listing.get("Uploads", []):
                if upload["Initiated"].timestamp() >= older_than:
                    continue  # may still be running
                aborted.append(f"{bucket}/{upload['Key']}")
                if not dry_run:
                    self.fs.call_s3(
                        "abort_multipart_upload",
                        Bucket=bucket,
                        Key=upload["Key"],
                        UploadId=upload["UploadId"],
                    )
        return aborted

    def put_file(self, local: str | Path, path: str, on_bytes: OnBytes | None = None) -> None:
        # One PUT for small files; parallel multipart parts for large ones, which s3fs aborts
        # on error. A single PUT asks S3 to check and keep the bytes' SHA-256 (botocore sends
        # it, S3 refuses a body that differs), so a later presence check reads it with a HEAD.
        one_put = os.path.getsize(local) < SINGLE_PUT_BYTES
        extra = {"ChecksumAlgorithm": "SHA256"} if one_put else {}
        with self._errors(f"cannot upload {path}"):
            self.fs.put_file(str(local), path, callback=_Counted(on_bytes), **extra)

    def stored_sha256(self, path: str) -> str | None:
        # A multipart object's checksum is of its parts' checksums ("<b64>-<parts>"): no use.
        bucket, _, key = path.partition("/")
        with self._errors(f"cannot stat {path}"):
            head = self.fs.call_s3("head_object", Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        value = head.get("ChecksumSHA256")
        if not isinstance(value, str) or "-" in value:
            return None
        return base64.b64decode(value).hex()

    def swap(self, path: str, data: bytes, token: Any) -> None:
        if not self._conditions_honoured():
            return _swap_unchecked(self, path, data, token)
        condition = {"mode": "create"} if token is None else {"IfMatch": token}
        if not self._put_if(path, data, **condition):
            raise SwapConflict(f"{path} changed while moving it")

    def delete_if(self, path: str, token: Any) -> bool:
        # DeleteObject with If-Match (S3 since 2025): 412 when another wrote it since. A store
        # that ignores the header deletes anyway (the base version's race, no worse).
        bucket, _, key = path.partition("/")
        with self._errors(f"cannot delete {path}"):
            try:
                self.fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=token)
            except FileNotFoundError:
                return False
            except Exception as exc:
                if _is_precondition_failure(exc):
                    return False
                raise
            finally:
                self.fs.invalidate_cache(path)
        return True


def _create_unchecked(backend: Backend, path: str, data: bytes) -> bool:
    """Create by checking, then writing: of two racing writers, the last one wins."""
    if backend.exists(path):
        return False
    backend.put(path, data)
    return True


def _swap_unchecked(backend: Backend, path: str, data: bytes, token: Any) -> None:
    """Compare-and-swap by reading, then writing: of two racing writers, the last one wins."""
    if backend.read_versioned(path, SWAPPED_BYTES)[1] != token:
        raise SwapConflict(f"{path} changed while moving it")
    backend.put(path, data)


class LastWriterWinsBackend(Backend):
    """Any other writable fsspec file system, by explicit opt-in: check-then-write, may race."""

    def put(self, path: str, data: bytes) -> None:
        with self._errors(f"cannot write {path}"):
            self.fs.pipe_file(path, data)

    def create(self, path: str, data: bytes) -> bool:
        return _create_unchecked(self, path, data)

    def put_file(self, local: str | Path, path: str, on_bytes: OnBytes | None = None) -> None:
        with self._errors(f"cannot upload {path}"):
            self.fs.put_file(str(local), path, callback=_Counted(on_bytes))

    def swap(self, path: str, data: bytes, token: Any) -> None:
        _swap_unchecked(self, path, data, token)


class ReadOnly(Backend):
    """Any backend, read only: reads go to ``inner``; every write is refused with one
    :class:`~neuronbuild.errors.UserError` (as sccache's ``ReadOnlyStorage`` wraps any storage).
    A create of an object already there writes nothing and answers False, as every backend does
    (the first one wins): re-publishing what such a store holds is not a write."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner.fs, inner.places, inner.url)
        self.inner = inner

    def _refuse(self) -> UserError:
        from neuronbuild.transports.schemes import atomic_schemes

        atomic = atomic_schemes()
        return UserError(
            f"{self.url}: writing here needs atomic writes, which only "
            f"{', '.join(atomic[:-1])} and {atomic[-1]} provide; pass --last-writer-wins to "
            "write anyway"
        )

    def check_root(self, create: bool) -> None:
        self.inner.check_root(create)

    def check_writes_allowed(self) -> None:
        raise self._refuse()

    def read_versioned(self, path: str, limit: int) -> tuple[bytes | None, Any]:
        return self.inner.read_versioned(path, limit)

    def size(self, path: str) -> int | None:
        return self.inner.size(path)

    def modified(self, path: str, fresh: bool = False) -> float | None:
        return self.inner.modified(path, fresh)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def find(self, prefix: str) -> list[str]:
        return self.inner.find(prefix)

    def list_sizes(self, prefix: str) -> dict[str, int]:
        return self.inner.list_sizes(prefix)

    def list_modified(self, prefix: str) -> dict[str, float | None]:
        return self.inner.list_modified(prefix)

    def open_read(self, path: str, size: int | None = None) -> IO[bytes]:
        return self.inner.open_read(path, size)

    def stored_sha256(self, path: str) -> str | None:
        return self.inner.stored_sha256(path)

    def abort_abandoned_uploads(self, older_than: float, dry_run: bool) -> list[str]:
        found = self.inner.abort_abandoned_uploads(older_than, dry_run=True)
        if found and not dry_run:
            raise self._refuse()
        return found

    def put(self, path: str, data: bytes) -> None:
        raise self._refuse()

    def create(self, path: str, data: bytes) -> bool:
        if self.inner.exists(path):
            return False
        raise self._refuse()

    def put_file(self, local: str | Path, path: str, on_bytes: OnBytes | None = None) -> None:
        raise self._refuse()

    def swap(self, path: str, data: bytes, token: Any) -> None:
        raise self._refuse()

    def delete(self, path: str) -> None:
        raise self._refuse()

    def delete_if(self, path: str, token: Any) -> bool:
        raise self._refuse()


def s3_options() -> dict[str, Any]:
    """s3fs options: 5 s to connect, ``$NEURONBUILD_S3_READ_TIMEOUT`` (default 20) seconds per
    read, and no retries of botocore's own: :mod:`neuronbuild.transports.retry` retries each request
    (5 attempts, with backoff, on throttling, 5xx and timeouts) and says so on stderr; a fault
    that outlasts them is a StoreError (exit code 3).

    Raises:
        EnvInvalid: the timeout is not a positive number (the message names the variable).
    """
    return {
        "config_kwargs": {
            "connect_timeout": 5,
            "read_timeout": envs.S3_READ_TIMEOUT.get(),
            "retries": dict(retry.S3_RETRIES),
        }
    }


def _filesystem(url: str, places: PlacesAt, **options: Any) -> tuple[AbstractFileSystem, Places]:
    """fsspec's file system for ``url`` and the store's places at its root.

    Raises:
        UserError: fsspec refuses the URL. ImportError: its implementation is not installed.
    """
    try:
        fs, root = fsspec.core.url_to_fs(url, **options)
    except ValueError as exc:
        raise UserError(f"--cache {url!r}: {exc}") from None
    return fs, places(root.rstrip("/"))


def open_folder(url: str, last_writer_wins: bool, places: PlacesAt) -> Backend:
    """A folder store (a path, ``file://``; NFS included): atomic (row ``file`` of
    :data:`~neuronbuild.transports.schemes.SCHEMES`)."""
    return FolderBackend(*_filesystem(url, places), url)


def open_object(url: str, last_writer_wins: bool, places: PlacesAt) -> Backend:
    """An S3 store (``s3://``), conditional writes and all (row ``s3``), with
    :func:`s3_options`; ``last_writer_wins``: also on an endpoint that ignores them."""
    backend = ObjectBackend(*_filesystem(url, places, **s3_options()), url)
    backend.last_writer_wins = last_writer_wins
    return backend


def open_other(url: str, last_writer_wins: bool, places: PlacesAt) -> Backend:
    """Any other fsspec file system: last-writer-wins by the opt-in, else read-only."""
    backend = LastWriterWinsBackend(*_filesystem(url, places), url)
    return backend if last_writer_wins else ReadOnly(backend)
