"""A local folder store in front of a remote store: one policy object around any two stores.

As sccache's ``multilevel`` cache, a fast level sits in front of a slow one and back-fills on a
hit: reads go through the local tier (a manifest's blobs are fetched into it once, verified; a
corrupt local blob is fetched again), writes go through to it after a compile, and a ref is read
from the remote, or from the local copy when the remote cannot be reached. What it did that a
user should hear about comes back as :attr:`TieredStore.notes`, which the CLI prints.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from neuronbuild.digest import DigestMismatch
from neuronbuild.errors import StoreDataInvalid, StoreError
from neuronbuild.folders import boot_id
from neuronbuild.human import count
from neuronbuild.store.cas import Store
from neuronbuild.store.index import Index
from neuronbuild.store.names import Accept, Listing, Target, resolve
from neuronbuild.store.records import FileRecord, Manifest
from neuronbuild.store.transfer import (
    CopyReport,
    MeterFactory,
    copy_blob,
    copy_manifest,
    scratch_folder,
)


class TieredStore:
    """``local`` (a folder store on this node) in front of ``remote`` (any store; None when
    the local store is the only one). ``progress``: makes the meter a fill tells the bytes it
    moves (:data:`~.transfer.MeterFactory`; a command's shows them on stderr; None, the
    default, tells nobody)."""

    def __init__(
        self, local: Store, remote: Store | None = None, progress: MeterFactory | None = None
    ) -> None:
        if remote is not None and remote.url == local.url:
            remote = None
        self.local, self.remote = local, remote
        self.notes: list[str] = []
        self.progress = progress

    def skip_blob_fsync(self) -> bool:
        """For ``serve``'s fetch: keep the blobs the local tier fetches without an ``fsync``
        each, where there is a remote to fetch a torn one from again and the machine gives a
        boot id (:func:`~neuronbuild.folders.boot_id`): what trusts them across processes (the
        lay-out stamp) holds only within the boot that wrote it, so after a crash every blob is
        hashed before use and a torn one fetched again. Returns whether it applies. ``pull``
        keeps the fsync: a pulled node may serve with no remote to fetch from."""
        if self.remote is None or boot_id() is None:
            return False
        self.local.backend.durable_blobs = False
        return True

    @property
    def url(self) -> str:
        """The store a user named (the remote, else the local one), for messages."""
        return (self.remote or self.local).url

    def get_ref(self, name: str, tag: str) -> str | None:
        """The remote ref; the local tier's copy only when the remote cannot be reached."""
        if self.remote is None:
            return self.local.get_ref(name, tag)
        try:
            return self.remote.get_ref(name, tag)
        except StoreError as exc:
            digest = self.local.get_ref(name, tag)
            if digest is None:
                raise
            self.notes.append(
                f"{self.remote.url} unreachable ({exc}); using the pulled {name}/{tag}"
            )
            return digest

    def resolve_target(self, text: str, accept: Accept = "any", hint: str = "") -> Target:
        """What ``text`` names (see :meth:`Store.resolve_target`), read as :meth:`get_ref` reads
        refs: from the remote, or from the local tier when the remote cannot be reached.
        ``hint``: what to do when a ref is missing (appended to the error).

        Raises:
            UserError: nothing matches (the refs that exist are named), a prefix is ambiguous or
                too short, or the text is neither a ref nor a digest.
            StoreError: the remote cannot be reached and the local tier lacks the ref (the
                remote's error), or the local tier cannot be read either.
        """

        def listed(read: Callable[[Store], list[str]]) -> Callable[[], list[str]]:
            def call() -> list[str]:
                if self.remote is None:
                    return read(self.local)
                try:
                    return read(self.remote)
                except StoreError:
                    return read(self.local)

            return call

        listing = Listing(
            self.get_ref,
            listed(lambda store: sorted(store.refs())),
            listed(lambda store: store.manifest_digests() + store.index_digests()),
            self.url,
        )
        return resolve(listing, text, accept, hint)

    def get_manifest(self, digest: str) -> Manifest:
        """Manifests are immutable: the local tier's copy is as good as the remote's, once it
        parses and hashes to its name; a bad local copy is noted and read from the remote."""
        if self.remote is None:
            return self.local.get_manifest(digest)
        if self.local.has_manifest(digest):
            try:
                return self.local.get_manifest(digest)
            except StoreDataInvalid as exc:
                self.notes.append(f"{exc}; reading {self.remote.url}'s copy")
        return self.remote.get_manifest(digest)

    def get_index(self, digest: str) -> Index | None:
        """The index ``digest`` names, from the local tier, else the remote; None where it names
        none (a manifest).

        Raises:
            StoreDataInvalid: a malformed or hostile index. StoreError: the store failed.
        """
        for store in (self.local, self.remote):
            if store is not None and store.is_index(digest):
                return store.get_index(digest)
        return None

    def get_attestations(self, digest: str) -> list[tuple[str, bytes]]:
        """The attestations of manifest ``digest`` in every tier, ``(keyid, bytes)``: the local
        tier's, then the remote's (a policy accepts a manifest when one of them passes).

        Raises:
            StoreDataInvalid: see :meth:`Store.get_attestations`.
        """
        found = list(self.local.get_attestations(digest).items())
        if self.remote is not None:
            found += self.remote.get_attestations(digest).items()
        return found

    def get_additions(self, digest: str) -> dict[str, bytes]:
        """The additions of manifest ``digest`` in every tier, by name (one copy of each: the
        name is the hash of its Statement, so either tier's is the same addition; signatures
        may differ, and the remote's, the one nodes publish to, wins).

        Raises:
            StoreDataInvalid: see :meth:`Store.get_additions` (the remote unreachable: the local
                tier's alone, noted).
        """
        found = self.local.get_additions(digest)
        if self.remote is not None:
            try:
                found.update(self.remote.get_additions(digest))
            except StoreError as exc:  # an offline node serves what it pulled, additions too
                self.notes.append(f"{exc}; additions read from {self.local.url} alone")
        return found

    def fill_blobs(self, files: list[FileRecord]) -> None:
        """Copy, verified, the blobs of ``files`` the local tier lacks from the remote (the
        files of an addition, which no manifest fill fetches).

        Raises:
            StoreDataInvalid: a blob no tier holds, or whose bytes do not match.
        """
        missing = self.local.missing_blobs(files)
        if not missing:
            return
        if self.remote is None:
            raise StoreDataInvalid(
                f"{self.local.url}: {count(len(missing), 'blob')} missing, e.g. {missing[0].digest}"
            )
        with scratch_folder(self.local) as scratch:
            for file in missing:
                copy_blob(self.remote, self.local, file, Path(scratch))

    def check_complete(self, manifest: Manifest, digest: str) -> None:
        """What a dry run checks, writing nothing: every blob of ``manifest`` (named ``digest``)
        is in the local tier or, failing that, in the remote (from which a fill would fetch it).

        Raises:
            StoreDataInvalid: naming how many blobs no tier holds (with their recorded size).
        """
        missing = self.local.missing_blobs(manifest.files())
        if missing and self.remote is not None:
            missing = self.remote.missing_blobs(missing)
        if missing:
            raise StoreDataInvalid(
                f"manifest {digest} is incomplete in {self.url}: "
                f"{count(len(missing), 'blob')} missing"
            )

    def fill(
        self, digest: str, *, jobs: int = 8, recheck: bool = False, what: str = "fetch"
    ) -> CopyReport | None:
        """Read-through: copy the manifest and the blobs the local tier lacks from the remote
        (``recheck``: also re-hash what it holds), its progress named ``what``. None when there
        is no remote."""
        if self.remote is None:
            return None
        report = copy_manifest(
            self.remote,
            self.local,
            digest,
            jobs=jobs,
            recheck=recheck,
            progress=self.progress,
            what=what,
            role="local tier",
            additions=False,
        )
        self.notes += report.notes
        return report

    def write_through(self, digest: str, name: str, tag: str) -> None:
        """After a compile into the remote: keep the sealed build and its ref locally too."""
        if self.remote is not None:
            self.fill(digest)
        self.local.set_ref(name, tag, digest)

    def fetch_blob(self, file: FileRecord, dest: Path) -> None:
        """Copy a blob to ``dest`` from the local tier, verified; a corrupt local copy is noted,
        fetched again from the remote and then copied.

        Raises:
            StoreDataInvalid: the blob is missing or corrupt in every tier.
        """
        try:
            self.local.fetch_blob(file, dest)
            return
        except StoreDataInvalid as exc:
            if self.remote is None:
                raise
            what = (  # repaired here: the remedy a corrupt blob's error names is not the user's
                f"{self.local.blob_url(file.digest)} is corrupt"
                if isinstance(exc, DigestMismatch)
                else str(exc)
            )
            self.notes.append(f"{what}; fetching it again from {self.remote.url}")
        self.local.delete_blob(file)
        with scratch_folder(self.local) as scratch:
            copy_blob(self.remote, self.local, file, Path(scratch))
        self.local.fetch_blob(file, dest)
