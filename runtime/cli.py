"""``neuronbuild serve``: the command inference nodes run (or ``python -m neuronbuild_runtime``)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from neuronbuild import envs
from neuronbuild.engines.base import SERVING_ONLY_ARGS
from neuronbuild.errors import StoreError, UserError
from neuronbuild.recipe import vllm_engine_args
from neuronbuild.store.cas import Store, parse_ref
from neuronbuild.store.tiered import TieredStore

from .serve import ServeSource, exec_vllm, prepare

SERVING_FLAGS = {"--host", "--port", "--api-key", "--served-model-name", "--log-level"}


def echo_notes(notes: list[str]) -> None:
    """Print what a tiered store did that a user should hear about, one line each."""
    for note in notes:
        click.echo(f"note: {note}", err=True)


def refuse_engine_options(extra: list[str]) -> None:
    """Only pure serving options pass through; an engine argument is fixed by the recipe (and,
    unless it is serving-only, part of the unit key)."""
    for arg in extra:
        name = arg.lstrip("-").split("=", 1)[0].replace("-", "_").removeprefix("no_")
        if arg.startswith("--") and name in SERVING_ONLY_ARGS:
            raise UserError(f"{arg}: {name} is set in the recipe, not on the serve command line")
        if arg.startswith("--") and name in vllm_engine_args():
            raise UserError(
                f"{arg}: {name} is part of the unit key and fixed by the recipe; change the "
                "recipe and compile it, then serve"
            )
        raise UserError(f"{arg}: not a serving option; use one of {sorted(SERVING_FLAGS)}")


@click.command()
@click.argument("target", metavar="REF|MANIFEST")
@click.option("--cache", default=envs.default_cache_url, help="The remote store to pull from.")
@click.option(
    "--local-cache", required=True, type=click.Path(file_okay=False), help="Local store to fill."
)
@click.option(
    "-j", "--jobs", default=8, show_default=True, type=click.IntRange(1), help="Parallel transfers."
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def pull(target: str, cache: str, local_cache: str, jobs: int, as_json: bool) -> None:
    """Pre-stage a node or a container image: copy REF|MANIFEST and its blobs (verified) into
    --local-cache, after which `serve --local-cache` runs without network access. Checks free
    disk space first; an interrupted pull resumes."""
    remote = Store(cache)
    tiers = TieredStore(Store(local_cache, create=True), remote)
    digest = remote.resolve(target)
    report = tiers.fill(digest, jobs=jobs, recheck=True)
    if report is None:
        raise UserError(f"--local-cache {local_cache}: it is the --cache store itself")
    if not target.startswith("sha256:"):
        tiers.local.set_ref(*parse_ref(target), digest)
    echo_notes(tiers.notes)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(
            f"pulled {digest} into {tiers.local.url}: {report.copied} blobs fetched "
            f"({report.bytes} bytes), {report.skipped} already there"
        )


def node_tiers(cache: str, local_cache: str | None, dry_run: bool) -> TieredStore:
    """The stores ``serve`` reads: ``--local-cache`` in front of ``--cache``; without it, a
    folder store alone (read-only is fine: files are linked or copied out of it), or the
    node's default local tier in front of a remote store. A dry run creates nothing."""
    try:
        remote = Store(cache)
    except StoreError as exc:
        if local_cache is None or not Path(local_cache).is_dir():
            raise
        tiers = TieredStore(Store(local_cache))  # refs and blobs a pull left there
        tiers.notes.append(f"{exc}; serving from {local_cache} alone")
        return tiers
    if local_cache is None and remote.is_folder:
        return TieredStore(remote)
    local_url = local_cache or str(envs.user_cache() / "store")
    if dry_run and not Path(local_url).is_dir():
        return TieredStore(remote)
    return TieredStore(Store(local_url, create=not dry_run), remote)


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("recipe", required=False, type=click.Path(dir_okay=False))
@click.option("--ref", help="Serve the manifest a ref points at: <name>/<tag>.")
@click.option("--manifest", "manifest_digest", help="Serve one manifest: sha256:<64 hex>.")
@click.option(
    "--cache",
    default=envs.default_cache_url,
    show_default="$NEURONBUILD_CACHE or ~/.cache/neuronbuild/store",
    help="The store (a folder or URL).",
)
@click.option(
    "--local-cache",
    type=click.Path(file_okay=False),
    help="Local store to fetch blobs into first (default: the --cache folder itself, else "
    "~/.cache/neuronbuild/store).",
)
@click.option(
    "--vllm-cache-root",
    type=click.Path(file_okay=False),
    help="Where to lay the artifacts out (default: $VLLM_CACHE_ROOT, else "
    "~/.cache/neuronbuild/layouts/<manifest>).",
)
@click.option(
    "--deep", is_flag=True, help="Re-hash laid-out files even when their recorded stat holds."
)
@click.option("--host", help="vLLM server host.")
@click.option("--port", type=int, help="vLLM server port.")
@click.option("--api-key", help="vLLM server API key.")
@click.option("--served-model-name", help="Model name the server answers to.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="vLLM's log level.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, exists=True),
    help="Folder vLLM runs in, where a relative model path resolves (default: the recipe's "
    "folder for RECIPE, else the current folder).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check the manifest, the node and every blob's presence, print the vLLM command; "
    "write nothing, start nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: print the result as JSON.")
@click.pass_context
def serve(
    ctx: click.Context,
    recipe: str | None,
    ref: str | None,
    manifest_digest: str | None,
    cache: str,
    local_cache: str | None,
    vllm_cache_root: str | None,
    deep: bool,
    host: str | None,
    port: int | None,
    api_key: str | None,
    served_model_name: str | None,
    log_level: str | None,
    workdir: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Serve RECIPE (its <name>/latest), --ref NAME/TAG or --manifest sha256:... from prebuilt
    artifacts alone, with vLLM's compilation forbidden.

    Exits 2 before vLLM starts when the manifest is missing or incomplete, when RECIPE no longer
    matches it, or when an option would change what was compiled.
    """
    refuse_engine_options(list(ctx.args))
    if sum(x is not None for x in (recipe, ref, manifest_digest)) != 1:
        raise UserError("give exactly one of RECIPE, --ref NAME/TAG or --manifest sha256:...")
    serving: list[str] = []
    for option, value in (("--host", host), ("--port", port), ("--api-key", api_key)):
        if value is not None:
            serving += [option, str(value)]
    if served_model_name:
        serving += ["--served-model-name", served_model_name]
    env = {envs.VLLM_LOGGING_LEVEL: log_level.upper()} if log_level else {}
    prepared = prepare(
        ServeSource(recipe, ref, manifest_digest),
        node_tiers(cache, local_cache, dry_run),
        cache_root=Path(vllm_cache_root).resolve() if vllm_cache_root else None,
        serving_args=serving,
        serving_env=env,
        workdir=Path(workdir).resolve() if workdir else None,
        deep=deep,
        dry_run=dry_run,
    )
    echo_notes(prepared.notes)
    if dry_run:
        if as_json:
            click.echo(json.dumps(prepared.to_json(), indent=2))
        else:
            click.echo(
                f"manifest {prepared.manifest}: {prepared.files} files, {prepared.bytes} bytes"
            )
            click.echo(f"laid out under {prepared.cache_root}")
            click.echo("would run: " + " ".join(prepared.argv))
        return
    click.echo(
        f"neuronbuild: serving {prepared.manifest} ({prepared.files} files verified) from "
        f"{prepared.cache_root}; compilation is disabled",
        err=True,
    )
    exec_vllm(prepared)
