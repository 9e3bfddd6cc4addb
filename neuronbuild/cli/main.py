"""The ``neuronbuild`` command group: its global options and the console entry point.

The group and its global options live here; the commands, by what they work on, in
:mod:`~neuronbuild.cli.build` (recipes to sealed manifests), :mod:`~neuronbuild.cli.store` (what a
store holds), :mod:`~neuronbuild.cli.diagnose` (why a unit misses, the host's ISA) and
``neuronbuild_runtime.cli`` (``serve``, ``pull``: the node side).

Exit codes (DESIGN.md): 0 done; 1 some units failed; 2 bad input; 3 store or network failure.
"""

from __future__ import annotations

import click

from neuronbuild import __version__
from neuronbuild.cli import attest, build, conformance, diagnose, image, store
from neuronbuild.ui.console import run
from neuronbuild.ui.options import QUIET_HELP, VERBOSE_HELP, check_verbosity, verbosity_options
from neuronbuild.ui.verbosity import set_verbosity
from neuronbuild_runtime.cli import pull, serve


def print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version`` (click's eager callback): neuronbuild's version, then each engine's
    toolchain as installed here, and exit."""
    if value and not ctx.resilient_parsing:
        from neuronbuild.engines.registry import installed_toolchains

        click.echo(f"neuronbuild {__version__}")
        for name, found in installed_toolchains().items():
            listed = ", ".join(f"{d} {v or '(not installed)'}" for d, v in found.items())
            click.echo(f"engine {name}: {listed}")
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=print_version,
    help="Print neuronbuild's version and the engines' installed toolchains, and exit.",
)
@click.option("-v", "--verbose", is_flag=True, help=VERBOSE_HELP)
@click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)
def cli(verbose: bool, quiet: bool) -> None:
    """Compile vLLM's graphs ahead of time, store them content-addressed, serve them.

    \b
    Typical flow:
      neuronbuild validate recipe.yaml     check a recipe against vLLM-Neuron's rules
      neuronbuild plan recipe.yaml         list every graph that will be compiled
      neuronbuild compile recipe.yaml      compile and publish them to the store
      neuronbuild serve recipe.yaml        serve them with vLLM, compilation forbidden

    -v and -q go before or after the command: neuronbuild compile -q recipe.yaml.
    """
    set_verbosity(check_verbosity(verbose, quiet))


for command in (
    build.validate,
    build.plan,
    build.compile_,
    build.seal,
    attest.sign,
    store.verify,
    store.push,
    store.tag,
    store.ls_,
    store.gc,
    store.status,
    image.image,
    diagnose.doctor,
    diagnose.isa,
    conformance.conformance,
    serve,
    pull,
):
    command.params.extend(verbosity_options())  # -v/-q after the command name too
    cli.add_command(command)


def main() -> None:
    """Console entry point (``neuronbuild``)."""
    run(cli)
