"""The store commands: ``verify``, ``push``, ``tag``, ``ls``, ``gc`` and ``status`` (what a store
holds, and moving it between stores and refs)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from neuronbuild.cli.common import load_or_exit
from neuronbuild.human import ABSENT, ago, count, format_table, size, text, when
from neuronbuild.ui.console import echo_json
from neuronbuild.ui.options import (
    cache_option,
    dry_run_option,
    jobs_option,
    json_option,
    last_writer_wins_option,
    policy_option,
    ref_move_options,
)
from neuronbuild.ui.verbosity import key_text

if TYPE_CHECKING:
    from neuronbuild.store.cas import Store
    from neuronbuild.store.records import Manifest


def hollow_files(manifest: Manifest) -> list[str]:
    """One problem per file of ``manifest`` its engine's content rule says must hold bytes and
    that is empty (:meth:`~neuronbuild.engines.base.Engine.hollow`): present with its size and
    digest, so no blob check sees it, yet every node fails to load it."""
    from neuronbuild.engines.registry import engine_names, get_engine

    names = {str(u.factors.get("engine")) for u in manifest.units} & set(engine_names())
    return [
        f"{path}: empty (the compile's save failed); compile {manifest.name} again"
        for name in sorted(names)
        for path in get_engine(name).hollow((f.path, f.size) for f in manifest.files())
    ]


@click.command()
@click.argument("target", metavar="REF|MANIFEST")
@cache_option
@click.option("--deep", is_flag=True, help="Re-hash every blob, not only check presence and size.")
@click.option(
    "--repair",
    is_flag=True,
    help="With --deep: remove each corrupt blob, so that the next compile rebuilds its units "
    "(or push --from a store holding it whole copies it back).",
)
@policy_option
@json_option()
def verify(
    target: str, cache: str, deep: bool, repair: bool, policy: str | None, as_json: bool
) -> None:
    """Check that everything REF|MANIFEST references is in the store (exit 2 if not), and list
    its attestations (--json: with their predicates). Under a trust policy (--policy,
    $NEURONBUILD_POLICY), also that a signer it names for the ref signed it.

    \b
    Examples:
      neuronbuild verify app/latest --cache s3://bucket/store --deep
      neuronbuild verify app/latest --cache s3://bucket/store --deep --repair
      neuronbuild verify app/prod --policy policy.yaml --json
    """
    from neuronbuild.attest.inspect import describe_attestations
    from neuronbuild.attest.trust import policy_from
    from neuronbuild.orchestrate.verify import merged_reports, remove_corrupt, verify_manifest
    from neuronbuild.store.cas import Store

    if repair and not deep:
        raise click.UsageError("--repair removes the blobs --deep finds corrupt: add --deep")
    trusted = policy_from(policy)
    store = Store(cache)
    found = store.resolve_target(target)
    builds = store.manifests_of(found.digest)  # an index: each entry's build
    reports, entries = [], []
    for digest in builds:
        report = verify_manifest(store, digest, deep=deep)
        if repair:
            remove_corrupt(store, report)
        manifest = store.get_manifest(digest)
        report.problems += hollow_files(manifest)
        attestations = list(store.get_attestations(digest).items())
        ref = found.ref_text or f"{manifest.name}/{digest}"
        described, problems = describe_attestations(digest, attestations, trusted, (ref, manifest))
        report.problems += problems
        if trusted is not None:
            refusal = trusted.refusal(ref, digest, attestations, manifest=manifest)
            if refusal is not None:
                report.problems.append(refusal)
        reports.append(report)
        entries += described
    report = reports[0] if len(reports) == 1 else merged_reports(found.digest, reports)
    if as_json:
        echo_json(
            "verify",
            {
                "store": store.url,
                **report.to_json(),
                "policy": trusted.source if trusted else None,
                "attestations": entries,
            },
        )
    else:
        for entry in entries:
            if entry["problem"] is None:
                click.echo(attestation_line(entry))
        for problem in report.problems:
            click.echo(problem, err=True)
        how = "re-hashed" if deep else "present with their sizes"
        for one in reports:
            state = "ok" if not one.problems else count(len(one.problems), "problem")
            click.echo(
                f"{one.manifest}: {count(one.blobs, 'blob')}, {size(one.bytes)} {how}: {state}"
            )
        if len(reports) > 1:
            click.echo(f"index {found.digest}: {count(len(reports), 'build')}, each verified")
        if report.removed:
            click.echo(
                f"removed {count(len(report.removed), 'corrupt blob')}: the next compile of "
                f"{store.get_manifest(builds[0]).name} rebuilds the units that used them, or "
                f"push {target} --from a store holding them whole copies them back"
            )
        elif report.corrupt:
            click.echo(
                f"{count(len(report.corrupt), 'corrupt blob')}: add --repair to remove them, "
                "then compile rebuilds them (or push --from a store holding them whole)"
            )
    if report.problems:
        sys.exit(2)


def attestation_line(entry: dict[str, Any]) -> str:
    """``verify``'s line for one readable attestation (an entry of
    :func:`~neuronbuild.attest.inspect.describe_attestations`)."""
    state = {None: "not checked: no policy", True: "verified", False: "not verified"}
    signer = f", {entry['signer']}" if entry["signer"] else ""
    builder: Any = entry["predicate"]
    for name in ("runDetails", "builder", "id"):  # a signed but odd predicate reads as absent
        builder = builder.get(name) if isinstance(builder, dict) else None
    builder = builder if isinstance(builder, str) else ABSENT
    if not (builder.isascii() and builder.isprintable()):  # unverified text: one safe line
        builder = ascii(builder)
    by = f"identity {entry['identity']}" if entry["identity"] else f"key {entry['keyid'][:16]}"
    return f"attestation by {by}{signer} ({state[entry['verified']]}): built by {builder}"


@click.command()
@click.argument("target", metavar="REF|MANIFEST")
@click.option(
    "--from",
    "source",
    metavar="URL",
    required=True,
    help="The store to copy from (e.g. a CI folder), any URL --cache takes.",
)
@cache_option
@last_writer_wins_option
@ref_move_options
@jobs_option("blob transfers", default=8)
@json_option()
def push(
    target: str,
    source: str,
    cache: str,
    last_writer_wins: bool,
    rollback: bool,
    expect: str | None,
    jobs: int,
    as_json: bool,
) -> None:
    """Publish REF|MANIFEST from the --from store to --cache: blobs it lacks, unit records,
    the manifest, then (for a REF) the same ref, moved by compare-and-swap. A move back to a
    manifest the ref pointed at before (an old job folder) is refused unless --rollback.

    \b
    Examples:
      neuronbuild push app/latest --from ./ci-store --cache s3://bucket/store
      neuronbuild push app/latest --from ./ci-store --expect sha256:3f2a9c1b5d7e
    """
    from neuronbuild.errors import NoRoom, StoreDataInvalid
    from neuronbuild.store import moves
    from neuronbuild.store.cas import Store
    from neuronbuild.store.transfer import copy_manifest
    from neuronbuild.ui.progress import ByteProgress
    from neuronbuild.ui.verbosity import echo_notes

    src, dst = Store(source), Store(cache, last_writer_wins=last_writer_wins, create=True)
    found = src.resolve_target(target)
    if found.ref is None and (rollback or expect is not None):
        raise click.UsageError(f"--rollback and --expect move a ref; {target} names a manifest")
    ask = moves.Ask(rollback, moves.expected_digest(dst, expect))
    if found.ref:  # refused before any byte is copied; checked again as it moves
        moves.precheck(dst, *found.ref, found.digest, ask)
    files = [f for d in src.manifests_of(found.digest) for f in src.get_manifest(d).blobs()]
    lacking = dst.missing_blobs(files)
    absent = src.missing_blobs(lacking)
    if absent:  # a stage (compile --stage) names blobs of the store it read: not this one
        raise StoreDataInvalid(
            f"--from {src.url}: {found.digest} names {count(len(absent), 'blob')} neither it "
            f"nor {dst.url} holds (e.g. {absent[0].path}); push to the store the build read, "
            "or compile again"
        )
    # ByteProgress shows on stderr: stdout keeps --json.
    report = copy_manifest(src, dst, found.digest, jobs=jobs, progress=ByteProgress, what="push")
    echo_notes(list(report.notes))  # a corrupt copy the destination held, replaced
    ref = found.ref_text
    moved = None
    if found.ref:
        try:
            moved = moves.move_ref(dst, *found.ref, report.manifest, ask)
        except NoRoom as exc:
            raise exc.as_role("destination store") from None
    if as_json:
        echo_json(
            "push",
            {
                "from": src.url,
                "store": dst.url,
                "ref": ref,
                "previous": moved.previous if moved else None,
                **report.to_json(),
            },
        )
    else:
        click.echo(
            f"pushed {report.manifest}{f' ({ref})' if ref else ''} to {dst.url}: "
            f"{count(report.copied, 'blob')} copied ({size(report.bytes)}), "
            f"{report.skipped} already there"
        )
        if moved is not None:
            click.echo(moved.line())


@click.command()
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DST")
@cache_option
@last_writer_wins_option
@ref_move_options
@policy_option
@json_option()
def tag(
    source: str,
    destination: str,
    cache: str,
    last_writer_wins: bool,
    rollback: bool,
    expect: str | None,
    policy: str | None,
    as_json: bool,
) -> None:
    """Point ref DST (<name>/<tag>) at what SRC (a ref, a bare name, a manifest digest or its
    unique prefix, or an index's) points at, by compare-and-swap. Promote with
    `tag app/latest app/prod`; roll back to a manifest DST pointed at before (`ls --history`)
    with --rollback, as the second example does; without it such a move is refused. Under a
    trust policy (--policy, $NEURONBUILD_POLICY), a move onto a ref a rule of it matches (a
    protected name) is refused unless a signer that rule names signed the manifest (each build
    of an index).

    \b
    Examples:
      neuronbuild tag app/latest app/prod --cache s3://bucket/store
      neuronbuild tag 3f2a9c1b5d7e app/prod --rollback --cache s3://bucket/store
      neuronbuild tag app/latest app/prod --expect sha256:9e1f0c2a4b6d
    """
    from neuronbuild.attest.trust import policy_from
    from neuronbuild.store import moves
    from neuronbuild.store.cas import Store, parse_ref

    trusted = policy_from(policy)
    store = Store(cache, last_writer_wins=last_writer_wins)
    digest = store.resolve(source)
    builds = store.manifests_of(digest)  # an index: every build it lists
    manifests = [store.get_manifest(d) for d in builds]
    name, ref_tag = parse_ref(destination)
    for build, manifest in zip(builds, manifests, strict=True):
        if trusted is not None:  # refused before the ref is read for its swap
            attested = store.get_attestations(build).items()
            trusted.enforce(f"{name}/{ref_tag}", build, attested, manifest=manifest, required=False)
    ask = moves.Ask(rollback, moves.expected_digest(store, expect))
    moved = moves.move_ref(store, name, ref_tag, digest, ask)
    if as_json:
        echo_json(
            "tag",
            {
                "store": store.url,
                "ref": moved.ref,
                "previous": moved.previous,
                "manifest": digest,
            },
        )
    else:
        click.echo(moved.line())  # a result line: digests in full


@click.command(name="ls")
@cache_option
@click.option("--history", is_flag=True, help="Also list every move of every ref.")
@json_option()
def ls_(cache: str, history: bool, as_json: bool) -> None:
    """List the store's refs (with the keys that signed each one's manifest, as their
    attestations' names claim: `verify --policy` checks them, and how many receipts nodes wrote
    for it: neuronbuild probe) and count its manifests, unit
    records, blobs and bytes.

    \b
    Examples:
      neuronbuild ls --cache s3://bucket/store --history
    """
    from neuronbuild.engines.registry import describe_labels
    from neuronbuild.errors import StoreDataInvalid
    from neuronbuild.store.cas import Store, parse_ref
    from neuronbuild.ui.verbosity import echo_notes

    store = Store(cache)
    data = overview(store)
    refs = data["refs"]
    data["attestations"], data["receipts"], notes = {}, {}, []
    data["indexes"] = {}
    for d in sorted(set(refs.values())):
        try:
            if store.is_index(d):
                data["indexes"][d] = [e.to_json() for e in store.get_index(d).entries]
        except StoreDataInvalid as exc:  # one bad index hides no other ref
            data["indexes"][d] = []
            notes.append(f"{exc}; its builds are not listed (verify {d} says more)")
    builds = {e["manifest"] for entries in data["indexes"].values() for e in entries}
    for d in sorted((set(refs.values()) - set(data["indexes"])) | builds):
        data["receipts"][d] = len(store.receipt_names(d))
        try:
            data["attestations"][d] = sorted(store.attestation_paths(d))
        except StoreDataInvalid as exc:  # one manifest's bad folder hides no other ref
            data["attestations"][d] = []
            notes.append(f"{exc}; its signers are not listed (verify {d} says more)")
    echo_notes(notes)
    if history:
        data["history"] = {
            ref: [move.to_json() for move in store.ref_history(*parse_ref(ref))] for ref in refs
        }
    if as_json:
        echo_json("ls", data)
        return
    signers = data["attestations"]

    def row(first: str, d: str) -> list[str]:
        if d in data["indexes"]:
            return [first, f"{key_text(d)} (index of {len(data['indexes'][d])})", "", ""]
        signed = ", ".join(k[:16] for k in signers[d]) or ABSENT
        return [first, key_text(d), signed, str(data["receipts"][d])]

    rows = [["REF", "MANIFEST", "SIGNED BY", "RECEIPTS"]]
    for r, d in sorted(refs.items()):
        rows.append(row(r, d))
        for entry in sorted(data["indexes"].get(d, ()), key=lambda e: describe_labels(e["labels"])):
            rows.append(row(f"  {describe_labels(entry['labels'])}", entry["manifest"]))
    for line in format_table(rows):
        click.echo(line)
    for ref, moves in data.get("history", {}).items():
        click.echo(f"\nhistory of {ref}:")
        rows = [["MOVED", "FROM", "TO"]] + [
            [
                f"{when(move['time'])} ({ago(move['time'])})",
                key_text(move["previous"]) if move["previous"] else ABSENT,
                key_text(move["manifest"]),
            ]
            for move in reversed(moves)
        ]
        for line in format_table(rows, indent="  "):
            click.echo(line)
    click.echo(store_counts(data, store.url))


def overview(store: Store) -> dict[str, Any]:
    """``ls`` and ``status``'s account of ``store`` (:meth:`Store.overview`), its seed records
    (:mod:`~neuronbuild.orchestrate.seeds`) counted apart from the unit records of builds."""
    from neuronbuild.orchestrate.seeds import count_seed_records

    data = store.overview()
    data["n_seed_records"] = count_seed_records(store)
    data["n_unit_records"] -= data["n_seed_records"]
    return data


def store_counts(data: dict[str, Any], url: str) -> str:
    """``ls`` and ``status``'s line of what a store holds (``data``: :func:`overview`)."""
    seeds = data["n_seed_records"]
    kept = f" (and {count(seeds, 'seed record')} of failed runs)" if seeds else ""
    return (
        f"{count(data['n_manifests'], 'manifest')}, "
        f"{count(data['n_unit_records'], 'unit record')}{kept}, {count(data['n_blobs'], 'blob')} "
        f"({size(data['bytes'])}), {count(data['n_layouts'], 'node layout')} in {url}"
    )


@click.command()
@cache_option
@last_writer_wins_option
@dry_run_option("list what would be deleted")
@click.option(
    "--keep-last",
    metavar="N",
    type=click.IntRange(0),
    help="Keep only each ref's last N moves alive.",
)
@click.option(
    "--older-than",
    metavar="DAYS",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Grace period in days: younger objects are never deleted.",
)
@json_option()
def gc(
    cache: str,
    last_writer_wins: bool,
    dry_run: bool,
    keep_last: int | None,
    older_than: float,
    as_json: bool,
) -> None:
    """Delete what no ref or ref history reaches (mark and sweep), never a blob a live manifest
    uses nor anything younger than the grace period.

    \b
    Examples:
      neuronbuild gc --cache s3://bucket/store --keep-last 5 --dry-run
    """
    from neuronbuild.store.cas import Store
    from neuronbuild.store.gc import KIND_NOUNS, collect_garbage

    store = Store(cache, last_writer_wins=last_writer_wins)
    report = collect_garbage(
        store, keep_last=keep_last, older_than_days=older_than, dry_run=dry_run
    )
    if as_json:
        echo_json("gc", {"store": store.url, **report.to_json()})
        return
    verb = "would delete" if dry_run else "deleted"
    counts = (
        ", ".join(
            count(len(p), *KIND_NOUNS.get(kind, (kind,))) for kind, p in report.deleted.items()
        )
        or "nothing"
    )
    click.echo(
        f"{count(report.live_manifests, 'live manifest')}; {verb} {counts} "
        f"({size(report.bytes)} of blobs)"
    )
    for digest in report.restored:
        click.echo(f"kept {digest}: a ref moved to it while gc ran")


@click.command()
@click.argument("recipe_path", metavar="[RECIPE]", required=False, type=click.Path(dir_okay=False))
@cache_option
@json_option()
def status(recipe_path: str | None, cache: str, as_json: bool) -> None:
    """The store's refs and sizes; with RECIPE, how many of its graphs per kind are cached or
    missing, and where <name>/latest points.

    \b
    Examples:
      neuronbuild status
      neuronbuild status recipe.yaml --cache s3://bucket/store
    """
    from neuronbuild.orchestrate.doctor import recipe_status
    from neuronbuild.store.cas import Store

    store = Store(cache)
    data = overview(store)
    if recipe_path is not None:
        data["recipe"] = recipe_status(load_or_exit(recipe_path), store)
    if as_json:
        echo_json("status", data)
        return
    click.echo(f"{count(len(data['refs']), 'ref')}, {store_counts(data, store.url)}")
    if "recipe" in data:
        of_recipe = data["recipe"]
        click.echo(f"{of_recipe['name']}/latest -> {text(of_recipe['latest'])}")
        rows = [["KIND", "CACHED", "MISSING"]] + [
            [kind, str(n["cached"]), str(n["missing"])]
            for kind, n in of_recipe["n_graphs_by_kind"].items()
        ]
        for line in format_table(rows):
            click.echo(line)
