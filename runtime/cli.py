"""``neuronbuild serve``: the command inference nodes run (or ``python -m neuronbuild_runtime``)."""

from __future__ import annotations

from pathlib import Path

import click

from neuronbuild import envs
from neuronbuild.engines.registry import engine_fields
from neuronbuild.errors import NoRoom, StoreError, UserError
from neuronbuild.human import count, size
from neuronbuild.node.image_stamp import image_manifest_store
from neuronbuild.recipe import credential_hint
from neuronbuild.store.cas import Store
from neuronbuild.store.moves import Moved
from neuronbuild.store.names import MIN_PREFIX_HEX, Target
from neuronbuild.store.tiered import TieredStore
from neuronbuild.ui.console import echo_json
from neuronbuild.ui.env_help import EnvHelpCommand
from neuronbuild.ui.options import (
    cache_option,
    dry_run_option,
    jobs_option,
    json_option,
    local_cache_option,
    policy_option,
)
from neuronbuild.ui.progress import ByteProgress
from neuronbuild.ui.verbosity import echo_notes, info

from .node_config import check_local_tier
from .serve import Prepared, ServeSource, exec_vllm, prepare
from .serve_options import split_serve_args

HELP = {"help_option_names": ["-h", "--help"]}


class ServeCommand(EnvHelpCommand):
    """``serve``: vLLM server options are split off before click parses its own (see
    :func:`~.serve_options.split_serve_args`) and kept in ``ctx.meta["vllm_options"]``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        own: dict[str, bool] = {}
        for param in self.get_params(ctx):
            if isinstance(param, click.Option):
                for spelling in (*param.opts, *param.secondary_opts):
                    own[spelling] = not param.is_flag
        mine, passed = split_serve_args(args, own)
        ctx.meta["vllm_options"] = passed
        return super().parse_args(ctx, mine)


@click.command(context_settings=HELP)
@click.argument("target", metavar="REF|MANIFEST")
@cache_option
@local_cache_option("the one to fill.", required=True)
@jobs_option("blob transfers", default=8)
@policy_option
@json_option()
def pull(
    target: str, cache: str, local_cache: str, jobs: int, policy: str | None, as_json: bool
) -> None:
    """Pre-stage a node or a container image: copy REF|MANIFEST and its blobs (verified) into
    --local-cache, after which `serve --local-cache` runs without network access. Checks free
    disk space first; an interrupted pull resumes. Under a trust policy (--policy,
    $NEURONBUILD_POLICY), a manifest no signer it names for the ref signed is refused before
    any byte is copied (exit 2).

    \b
    Examples:
      neuronbuild pull app/prod --cache s3://bucket/store --local-cache /var/cache/nb
    """
    from neuronbuild.attest.trust import policy_from

    trusted = policy_from(policy)
    remote = Store(cache)
    found = remote.resolve_target(target)
    digest = found.digest
    if trusted is not None:
        for build in remote.manifests_of(digest):  # an index: each of its builds
            manifest = remote.get_manifest(build)
            named = found.ref_text or f"{manifest.name}/{build}"
            attested = remote.get_attestations(build).items()
            trusted.enforce(named, build, attested, manifest=manifest)
    if not Path(local_cache).is_dir():  # a tier to create: checked before any byte moves
        check_local_tier(local_cache)
    tiers = TieredStore(Store(local_cache, create=True), remote, progress=ByteProgress)
    if pull_writes(tiers, found):
        check_local_tier(tiers.local)
    try:
        report = tiers.fill(digest, jobs=jobs, recheck=True, what="pull")
    except StoreError:  # a write pull_writes did not foresee (a unit record, a corrupt copy)
        check_local_tier(tiers.local)  # a read-only tier: the same one line, exit 2
        raise
    if report is None:
        raise UserError(f"--local-cache {local_cache}: it is the --cache store itself")
    ref = found.ref_text
    previous = None
    if found.ref:
        # A mirror of the remote's ref, moved back too when the remote rolled back (no
        # --rollback here: neuronbuild.store.moves). A ref the tier already holds is not
        # written: a read-only tier is enough.
        try:
            previous = tiers.local.set_ref(*found.ref, digest)
        except NoRoom as exc:
            raise exc.as_role("local tier") from None
    echo_notes(tiers.notes)
    if as_json:
        echo_json(
            "pull",
            {
                "from": remote.url,
                "store": tiers.local.url,
                "ref": ref,
                "previous": previous,
                **report.to_json(),
            },
        )
    else:
        click.echo(
            f"pulled {digest}{f' ({ref})' if ref else ''} into {tiers.local.url}: "
            f"{count(report.copied, 'blob')} fetched ({size(report.bytes)}), "
            f"{report.skipped} already there"
        )
        if ref is not None:
            click.echo(Moved(ref, previous, digest).line())


def pull_writes(tiers: TieredStore, found: Target) -> bool:
    """Whether pulling ``found`` writes in the local tier: it lacks the manifest or one of its
    blobs, or the ref points elsewhere there. A tier that holds it all may be read-only (a node
    image's, checked by pulling again). The early check only: a write it does not foresee
    (a missing unit record, a corrupt copy replaced) is refused by :func:`pull` as this is."""
    local = tiers.local
    if tiers.remote is None:
        return False  # the --cache store itself: refused by the fill
    if not local.has_manifest(found.digest) and not local.is_index(found.digest):
        return True
    if found.ref and local.get_ref(*found.ref) != found.digest:
        return True
    builds = local.manifests_of(found.digest)
    if not all(local.has_manifest(d) for d in builds):
        return True
    return any(local.missing_blobs(tiers.get_manifest(d).blobs()) for d in builds)


def node_tiers(
    cache: str, local_cache: str | None, dry_run: bool, image: Path | None = None
) -> TieredStore:
    """The stores ``serve`` reads: ``--local-cache`` in front of ``--cache``; without it, a
    folder store alone (read-only is fine: files are linked or copied out of it), or the
    node's default local tier in front of a remote store. A dry run creates nothing.

    ``image``: for ``--manifest``, the layout root ``serve`` was given; where it is a node
    image's mount and neither ``--cache`` nor a ``--local-cache`` folder can be read (an
    air-gapped pod with the image volume only), the store the image carries is read alone (its
    manifest: :func:`~neuronbuild.node.image_stamp.image_manifest_store`)."""
    try:
        remote = Store(cache)
    except StoreError as exc:
        if local_cache is None or not Path(local_cache).is_dir():
            carried = image_manifest_store(image) if image is not None else None
            if carried is None:
                raise
            tiers = TieredStore(carried)
            tiers.notes.append(f"{exc}; serving the manifest the node image at {image} holds")
            return tiers
        tiers = TieredStore(Store(local_cache))  # refs and blobs a pull left there
        tiers.notes.append(f"{exc}; serving from {local_cache} alone")
        return tiers
    if local_cache is None and remote.is_folder:
        return TieredStore(remote)
    local_url = local_cache or str(envs.user_cache() / "store")
    if not Path(local_url).is_dir():  # a tier to create: checked before any byte moves
        check_local_tier(local_url)
        if dry_run:
            return TieredStore(remote)
    return TieredStore(Store(local_url, create=not dry_run), remote, progress=ByteProgress)


@click.command(cls=ServeCommand, context_settings=HELP)
@click.argument("recipe", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--ref", help="Serve the manifest a ref points at: <name>/<tag>, or <name> for <name>/latest."
)
@click.option(
    "--manifest",
    "manifest_digest",
    help=f"Serve one manifest: sha256:<64 hex>, or a unique prefix (at least {MIN_PREFIX_HEX} hex "
    "digits).",
)
@cache_option
@local_cache_option(
    "blobs are fetched into it first (default: none for a --cache folder, else "
    "~/.cache/neuronbuild/store)."
)
@click.option(
    "--vllm-cache-root",
    type=click.Path(file_okay=False),
    help="Where to lay the artifacts out (default: $VLLM_CACHE_ROOT, else "
    "~/.cache/neuronbuild/layouts/<manifest>); a node image's mount (neuronbuild image) is "
    "checked by its stamp and served read-only, nothing fetched.",
)
@click.option(
    "--deep", is_flag=True, help="Re-hash laid-out files even when their recorded stat holds."
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, exists=True),
    help="Folder vLLM runs in, where a relative model path resolves (default: the recipe's "
    "folder for RECIPE, else the current folder).",
)
@click.option(
    "--allow-mismatch",
    multiple=True,
    metavar="NAME",
    help="Serve although this node differs from the build in NAME (a distribution, target, "
    f"{''.join(f'{k}, ' for k in engine_fields())}model_files, weights); repeatable. For "
    "operators who know the artifacts still run.",
)
@dry_run_option(
    "check the manifest, the node and every blob's presence, print the vLLM command, start nothing"
)
@click.option(
    "--layout-only",
    is_flag=True,
    help="Fetch, verify and lay the artifacts out, print the vLLM command, start nothing (for an "
    "image build, or before running that command by hand).",
)
@click.option(
    "--no-additions",
    is_flag=True,
    help="Lay out no addition nodes gave back to the build (neuronbuild capture): its own files "
    "alone.",
)
@click.option(
    "--rollback",
    is_flag=True,
    help="Under a trust policy, serve a ref's build though its newest signature is older than "
    "that of the build this node last served under the ref (a rollback; signing the older "
    "build again needs no flag).",
)
@policy_option
@json_option(" (with --dry-run or --layout-only)")
def serve(
    recipe: str | None,
    ref: str | None,
    manifest_digest: str | None,
    cache: str,
    local_cache: str | None,
    vllm_cache_root: str | None,
    deep: bool,
    workdir: str | None,
    allow_mismatch: tuple[str, ...],
    dry_run: bool,
    layout_only: bool,
    no_additions: bool,
    rollback: bool,
    policy: str | None,
    as_json: bool,
) -> None:
    """Serve RECIPE (its <name>/latest), --ref NAME[/TAG] or --manifest DIGEST (or a unique
    prefix) from prebuilt artifacts alone, with vLLM's compilation forbidden.

    Any option of vLLM's OpenAI server that cannot change what was compiled (--host, --port,
    --chat-template, --log-level, ...) is passed to vLLM. Exits 2 before vLLM starts when the
    manifest is missing or incomplete, when RECIPE no longer matches it, when this node differs
    from the build (installed versions, target, instruction set, model files), when an
    option would change what was compiled, or when the layout root is inside a store (or holds
    one), or, under a trust policy (--policy, $NEURONBUILD_POLICY), when the manifest has no
    attestation by a signer the policy names for the ref, checked before any blob is fetched,
    or the ref's build was signed before the one this node last served under it (--rollback);
    exits 3 when the layout root or the local tier has no room. The newest addition a node
    gave back to the build (neuronbuild capture) that this node may use is laid out beside its
    files (under a policy, only one its additions entry trusts).

    \b
    Examples:
      neuronbuild serve recipe.yaml --port 8000
      neuronbuild serve --ref app/prod --cache s3://bucket/store --local-cache /var/cache/nb
      neuronbuild serve --ref app/prod --dry-run
    """
    if sum(x is not None for x in (recipe, ref, manifest_digest)) != 1:
        raise UserError("give exactly one of RECIPE, --ref NAME[/TAG] or --manifest DIGEST")
    if as_json and not (dry_run or layout_only):
        raise click.UsageError("--json needs --dry-run (a server's output is not one document)")
    if dry_run and layout_only:
        raise click.UsageError("--dry-run writes nothing and --layout-only lays out: give one")
    from neuronbuild.attest.trust import policy_from

    trusted = policy_from(policy)  # a bad policy file is refused before the store is read
    serving = list(click.get_current_context().meta.get("vllm_options", []))
    root = Path(vllm_cache_root).resolve() if vllm_cache_root else None
    prepared = prepare(
        ServeSource(recipe, ref, manifest_digest),
        node_tiers(cache, local_cache, dry_run, root if manifest_digest else None),
        cache_root=root,
        serving_args=serving,
        workdir=Path(workdir).resolve() if workdir else None,
        deep=deep,
        dry_run=dry_run,
        allow_mismatch=allow_mismatch,
        check_address=not layout_only,
        layout_only=layout_only,
        policy=trusted,
        additions=not no_additions,
        rollback=rollback,
    )
    echo_notes(prepared.notes)
    if prepared.picked is not None:
        info(prepared.picked.line, err=True)
    for flag in prepared.credentials():
        info(
            f"warning: {flag} puts a credential on vLLM's command line, which every user of this "
            f"node can read (ps): {credential_hint(flag)}; what serve prints shows it as ***",
            err=True,
        )
    for line in prepared.env_warnings:
        info(f"warning: {line}", err=True)
    for m in prepared.allowed:
        click.echo(
            f"WARNING: --allow-mismatch {m.name}: serving artifacts built for {m.built_for} on a "
            f"node with {m.node}; they may fail or misbehave",
            err=True,
        )
    if dry_run or layout_only:
        if as_json:
            echo_json("serve", prepared.to_json())
        else:
            echo_command(prepared, dry_run)
        return
    weights = "" if prepared.weights is None else f", {count(prepared.weights, 'weight file')}"
    info(
        f"neuronbuild: serving {prepared.manifest} ({count(prepared.files, 'file')}{weights} "
        f"verified) from {prepared.cache_root}; compilation is disabled",
        err=True,
    )
    exec_vllm(prepared)


def echo_command(prepared: Prepared, dry_run: bool) -> None:
    """What ``serve --dry-run`` or ``--layout-only`` prints: the manifest, its lay-out and the
    vLLM command to paste, saying what to run first when the lay-out is not there yet (vLLM
    would find no artifacts and stop: issue 20)."""
    click.echo(
        f"manifest {prepared.manifest}: {count(prepared.files, 'file')}, {size(prepared.bytes)}"
    )
    if not dry_run:
        click.echo(f"laid out under {prepared.cache_root}")
        click.echo("run:")
    elif prepared.laid_out:
        click.echo(f"laid out under {prepared.cache_root} already")
        click.echo("would run:")
    else:
        click.echo(f"would lay out under {prepared.cache_root}")
        click.echo(
            "would run, once laid out (first run this serve command with --layout-only instead "
            "of --dry-run):"
        )
    click.echo(prepared.command())


@click.command(cls=ServeCommand, context_settings=HELP)
@click.argument("recipe", required=False, type=click.Path(dir_okay=False))
@click.option("--ref", help="Capture for the manifest a ref points at: <name>/<tag> or <name>.")
@click.option(
    "--manifest",
    "manifest_digest",
    help="Capture for one manifest: sha256:<64 hex>, or a unique prefix.",
)
@cache_option
@local_cache_option(
    "blobs are fetched into it first (default: none for a --cache folder, else "
    "~/.cache/neuronbuild/store)."
)
@click.option(
    "--key",
    "key_ref",
    metavar="KEY_REF",
    help="The node's signing key: file:PATH or PATH of a PEM private key (Ed25519 or ECDSA "
    "P-256), or awskms:ARN; without it the addition is unsigned (a node under a trust policy "
    "lays out only additions signed by a signer its additions entry names).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=1800.0,
    show_default=True,
    help="Seconds vLLM may take to serve before the capture is refused.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, exists=True),
    help="Folder vLLM runs in (as serve --workdir).",
)
@policy_option
@json_option()
def capture(
    recipe: str | None,
    ref: str | None,
    manifest_digest: str | None,
    cache: str,
    local_cache: str | None,
    key_ref: str | None,
    timeout: float,
    workdir: str | None,
    policy: str | None,
    as_json: bool,
) -> None:
    """On the first node that serves a build, start it once as serve would, on a fresh
    lay-out, and give back to the store what that start wrote that no compile host can (vLLM
    Neuron 0.29's Precompile Cache: traced graphs) as an addition to its manifest. Later nodes
    with the same target and installed builds lay it out at serve and skip tracing.

    Nothing is published unless every check of serve passes (no --allow-mismatch) and vLLM
    served within --timeout. Exits 2 when the build's release writes nothing to give back,
    when vLLM did not serve, or when the start wrote nothing; 3 when the store failed.

    \b
    Examples:
      neuronbuild capture --ref app/prod --cache s3://bucket/store --key node.key
      neuronbuild capture recipe.yaml --timeout 3600
    """
    if sum(x is not None for x in (recipe, ref, manifest_digest)) != 1:
        raise UserError("give exactly one of RECIPE, --ref NAME[/TAG] or --manifest DIGEST")
    from neuronbuild.attest.keyless_sign import KeylessSigner
    from neuronbuild.attest.keys import load_signer
    from neuronbuild.attest.trust import policy_from

    from .capture import capture as capture_addition

    trusted = policy_from(policy)  # a bad policy or key is refused before the store is read
    signer = load_signer(key_ref, "--key") if key_ref else None
    if isinstance(signer, KeylessSigner):
        raise UserError(
            f"--key {key_ref}: an addition is signed with a key file or awskms:ARN, not keyless"
        )
    tiers = node_tiers(cache, local_cache, dry_run=False)
    captured = capture_addition(
        ServeSource(recipe, ref, manifest_digest),
        tiers,
        signer=signer,
        timeout=timeout,
        policy=trusted,
        serving_args=list(click.get_current_context().meta.get("vllm_options", [])),
        workdir=Path(workdir).resolve() if workdir else None,
    )
    echo_notes(tiers.notes)
    if as_json:
        echo_json("capture", {"store": (tiers.remote or tiers.local).url, **captured.to_json()})
    else:
        click.echo(captured.line())


@click.command(context_settings=HELP)
@click.option(
    "--ref", help="Probe for the manifest a ref points at: <name>/<tag>, or <name> for latest."
)
@click.option(
    "--manifest",
    "manifest_digest",
    help="Probe for one manifest: sha256:<64 hex>, or a unique prefix.",
)
@cache_option
@local_cache_option("the manifest is read through it (as serve --local-cache).")
@click.option(
    "--url",
    default="http://127.0.0.1:8000",
    show_default=True,
    help="The running server's address (vLLM's OpenAI-compatible API).",
)
@click.option(
    "--vllm-cache-root",
    type=click.Path(file_okay=False),
    help="Where serve laid the build out (default: as serve's: $VLLM_CACHE_ROOT, else "
    "~/.cache/neuronbuild/layouts/<manifest>).",
)
@click.option(
    "--record",
    is_flag=True,
    help="In CI: store this server's answers as the build's, for nodes to probe against.",
)
@click.option(
    "--force", is_flag=True, help="With --record: replace answers recorded for the build before."
)
@click.option("--no-receipt", is_flag=True, help="Write no receipt when the probe holds.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, exists=True),
    help="Folder a relative model path resolves in (as serve --workdir), for the receipt's "
    "account of the weights.",
)
@click.option(
    "--key",
    "key_ref",
    metavar="KEY_REF",
    help="The node's signing key for its receipt: file:PATH or PATH of a PEM private key "
    "(Ed25519 or ECDSA P-256), or awskms:ARN; without it the receipt is unsigned.",
)
@policy_option
@json_option()
def probe(
    ref: str | None,
    manifest_digest: str | None,
    cache: str,
    local_cache: str | None,
    url: str,
    vllm_cache_root: str | None,
    record: bool,
    force: bool,
    no_receipt: bool,
    workdir: str | None,
    key_ref: str | None,
    policy: str | None,
    as_json: bool,
) -> None:
    """Prove that the server at --url serves the build CI tested: it answers a fixed set of
    greedy requests as the server CI probed did (tokens exactly, logprobs within the recorded
    tolerance), and it compiled nothing since it started (the engine's compile cache under the
    lay-out holds the build's files alone), before and after it is asked. When both hold, write
    a receipt beside the build (ls counts them), signed with --key. Use it as a Kubernetes
    startup probe (it runs until it first holds: one receipt per start).

    Exits 0 when the probe holds; 1 when it does not; 2 when the build or its recorded answers
    are missing or the server does not answer; 3 when the store failed.

    \b
    Examples:
      neuronbuild probe --ref app/prod --cache s3://bucket/store --url http://127.0.0.1:8000
      neuronbuild probe --ref app/prod --cache s3://bucket/store --record   # in CI
    """
    if (ref is None) == (manifest_digest is None):
        raise UserError("give exactly one of --ref NAME[/TAG] or --manifest DIGEST")
    if force and not record:
        raise click.UsageError("--force replaces recorded answers: give it with --record")
    from neuronbuild.attest.keyless_sign import KeylessSigner
    from neuronbuild.attest.keys import load_signer
    from neuronbuild.attest.trust import policy_from

    from .probe import probe as run_probe

    trusted = policy_from(policy)  # a bad policy or key is refused before the store is read
    signer = load_signer(key_ref, "--key") if key_ref else None
    if isinstance(signer, KeylessSigner):
        raise UserError(f"--key {key_ref}: a receipt is signed with a key file or awskms:ARN")
    tiers = node_tiers(cache, local_cache, dry_run=True)
    probed = run_probe(
        ServeSource(ref=ref, manifest=manifest_digest),
        tiers,
        url,
        cache_root=Path(vllm_cache_root).resolve() if vllm_cache_root else None,
        record=record,
        receipt=not no_receipt,
        ref=ref,
        signer=signer,
        force=force,
        policy=trusted,
        workdir=Path(workdir).resolve() if workdir else None,
    )
    echo_notes(tiers.notes)
    if as_json:
        echo_json("probe", probed.to_json())
    else:
        click.echo(probed.line())
