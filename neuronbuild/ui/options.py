"""The command-line options several commands share, defined once: one name, one meaning and one
help text everywhere (``neuronbuild`` and ``neuronbuild serve`` alike).

``tests/cli/test_operator_checks.py`` walks every command of the group and fails when one spells a
shared option its own way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from neuronbuild import envs
from neuronbuild.human import count
from neuronbuild.ui.verbosity import NORMAL, QUIET, VERBOSE, set_verbosity, verbosity

F = TypeVar("F", bound=Callable[..., Any])

CACHE_HELP = (
    "The store: a folder, file://, s3://bucket/prefix, oci://HOST/REPOSITORY (oci+http:// for a "
    "plain-HTTP registry) or another fsspec URL."
)
CACHE_DEFAULT = "$NEURONBUILD_CACHE or ~/.cache/neuronbuild/store"
LOCAL_CACHE_HELP = "A local store folder in front of --cache"
JOBS_HELP = "How many run at once"
JSON_HELP = "Print the result as JSON on stdout instead of text (the same data)"
DRY_RUN_HELP = "Run every check and print what would be done, changing nothing"
VERBOSE_HELP = "More detail: unit keys in full, failed units' log tails."
QUIET_HELP = (
    "Only errors and final result lines (in a log, not a terminal, the heartbeats of long work "
    "stay: CI kills silent jobs)."
)
BOTH_VERBOSITIES = "-v/--verbose and -q/--quiet: give one of them"
LAST_WRITER_WINS_HELP = (
    "Allow publishing to an fsspec URL without atomic writes (not folders or s3://), or to an "
    "S3 endpoint that ignores conditional writes."
)


def cache_option(f: F) -> F:
    """``--cache URL``: the store a command reads or publishes to (DESIGN.md, "Command-line
    conventions"), default ``$NEURONBUILD_CACHE``, else the user's cache folder."""
    return click.option(
        "--cache",
        metavar="URL",
        default=envs.default_cache_url,
        show_default=CACHE_DEFAULT,
        help=CACHE_HELP,
    )(f)


def local_cache_option(role: str, required: bool = False) -> Callable[[F], F]:
    """``--local-cache DIR``: a node-local folder store in front of ``--cache``; ``role`` says
    what this command does with it."""
    return click.option(
        "--local-cache",
        metavar="DIR",
        required=required,
        type=click.Path(file_okay=False),
        help=f"{LOCAL_CACHE_HELP}: {role}",
    )


def jobs_option(what: str, default: int) -> Callable[[F], F]:
    """``-j/--jobs N``: how many of ``what`` run at once (like ``make -j``)."""
    return click.option(
        "-j",
        "--jobs",
        metavar="N",
        default=default,
        show_default=True,
        type=click.IntRange(1),
        help=f"{JOBS_HELP}: {what}.",
    )


def json_option(when: str = "") -> Callable[[F], F]:
    """``--json``: the command's result as JSON on stdout, the same data the text shows."""
    return click.option("--json", "as_json", is_flag=True, help=f"{JSON_HELP}{when}.")


def dry_run_option(what: str) -> Callable[[F], F]:
    """``--dry-run``: every check of the real run, and what it would do; nothing changes."""
    return click.option("--dry-run", is_flag=True, help=f"{DRY_RUN_HELP}: {what}.")


def last_writer_wins_option(f: F) -> F:
    """``--last-writer-wins``: let a command that writes the store publish to an fsspec URL that
    has no atomic create or compare-and-swap (DESIGN.md, "Store"), accepting that of two
    concurrent writers the last one wins."""
    return click.option("--last-writer-wins", is_flag=True, help=LAST_WRITER_WINS_HELP)(f)


ROLLBACK_HELP = (
    "Allow moving the ref back to a manifest it pointed at before (ls --history); without it "
    "such a move is refused (exit 2)."
)
EXPECT_HELP = (
    "Move the ref only if it now holds DIGEST (sha256:<hex> or a unique prefix), or no "
    "manifest at all (none); otherwise exit 2, nothing moved."
)


def ref_move_options(f: F) -> F:
    """``--rollback`` and ``--expect DIGEST|none``: what every command that moves a shared ref
    (``tag``, ``push``, ``compile``, ``seal``) lets the user ask of the move
    (:class:`neuronbuild.store.moves.Ask`; issue 20, "push can move a shared ref backwards")."""
    f = click.option("--expect", metavar="DIGEST|none", help=EXPECT_HELP)(f)
    return click.option("--rollback", is_flag=True, help=ROLLBACK_HELP)(f)


INDEX_HELP = (
    "Move <name>/<tag> to an index holding this build beside the builds the ref names now (for "
    "other targets, releases or instruction sets; a rebuild for the same ones replaces its "
    "entry), so each node picks its own; recipes of one name in one run are always indexed."
)


def index_option(f: F) -> F:
    """``--index``: seal into the family's index
    (:func:`neuronbuild.orchestrate.family.move_into_index`)."""
    return click.option("--index", "index", is_flag=True, help=INDEX_HELP)(f)


def check_ref_move_options(
    n_refs: int, rollback: bool, expect: str | None, *, sharded: bool = False
) -> None:
    """Refuse :func:`ref_move_options` where they cannot mean one thing: ``--expect`` names
    one ref's value, so not with ``n_refs`` refs moved at once (recipes of several names; a
    family of one name moves one); a shard
    (``sharded``) moves no ref at all.

    Raises:
        click.UsageError: naming the option and the fix (exit 2).
    """
    given = "--expect" if expect is not None else "--rollback" if rollback else None
    if given is None:
        return
    if sharded:
        raise click.UsageError(f"{given}: a shard moves no ref; give it to seal")
    if expect is not None and n_refs > 1:
        raise click.UsageError(
            f"--expect: recipes of {count(n_refs, 'name')} move as many refs; give one recipe "
            "(or one family of one name) per command"
        )


def check_verbosity(verbose: bool, quiet: bool) -> int:
    """The verbosity level ``-v``/``-q`` ask for.

    Raises:
        click.UsageError: both given (wherever: before or after the command name).
    """
    if verbose and quiet:
        raise click.UsageError(BOTH_VERBOSITIES)
    return VERBOSE if verbose else QUIET if quiet else NORMAL


def _after_the_command(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:  # the group's -v/-q were parsed first and set the level (NORMAL when absent)
        level = VERBOSE if param.name == "verbose" else QUIET
        if verbosity() not in (NORMAL, level):
            raise click.UsageError(BOTH_VERBOSITIES)
        set_verbosity(level)


def verbosity_options() -> list[click.Option]:
    """``-v``/``--verbose`` and ``-q``/``--quiet`` as options of one command, so that they work
    after its name (``neuronbuild compile -q``) as well as before it (the group's own)."""
    return [
        click.Option(
            ["-v", "--verbose"],
            is_flag=True,
            expose_value=False,
            callback=_after_the_command,
            help=VERBOSE_HELP,
        ),
        click.Option(
            ["-q", "--quiet"],
            is_flag=True,
            expose_value=False,
            callback=_after_the_command,
            help=QUIET_HELP,
        ),
    ]


POLICY_HELP = (
    "Trust policy file (YAML) naming which signers may sign which refs; default "
    "$NEURONBUILD_POLICY. Under a policy, an unsigned or wrongly signed manifest is refused "
    "(exit 2)."
)


def policy_option(f: F) -> F:
    """``--policy FILE``: the trust policy (:mod:`neuronbuild.attest.policy`); absent, the
    command reads ``$NEURONBUILD_POLICY`` (:func:`neuronbuild.attest.policy.policy_from`)."""
    return click.option(
        "--policy", metavar="FILE", type=click.Path(dir_okay=False), help=POLICY_HELP
    )(f)


SIGN_HELP = (
    "Sign each sealed manifest with this key: file:PATH or PATH of a PEM private key, "
    "awskms:ARN of an AWS KMS key (ECC_NIST_P256), or sigstore: to sign keyless as the CI job's "
    "OIDC identity (sigstore:staging, or sigstore:PATH of a private instance's trust config)."
)


def sign_option(f: F) -> F:
    """``--sign KEY_REF``: sign each manifest the command seals (:mod:`neuronbuild.attest`)."""
    return click.option("--sign", "sign_key", metavar="KEY_REF", help=SIGN_HELP)(f)
