"""The CLI edge: run a click command and turn neuronbuild's errors into exit codes and one-line
messages (never a traceback for a user's mistake).

Exit codes (DESIGN.md): 0 done; 1 some units failed; 2 bad input; 3 store or network failure;
128 + signal number when interrupted.
"""

from __future__ import annotations

import sys

import click

from neuronbuild.errors import RecipeInvalid, StoreError, UserError


def format_table(rows: list[list[str]], indent: str = "") -> list[str]:
    """Left-aligned columns, two spaces apart, the first row being the header."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [
        (indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]


def run(command: click.Command) -> None:
    """Run ``command`` on ``sys.argv`` and exit with neuronbuild's exit codes."""
    try:
        command.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except RecipeInvalid as exc:
        for error in exc.errors:
            click.echo(f"{exc.source}: {error}", err=True)
        sys.exit(exc.exit_code)
    except UserError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except StoreError as exc:
        click.echo(f"store error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:  # a local path that cannot be read or written
        where = f": {exc.filename}" if exc.filename else ""
        click.echo(f"error: {exc.strerror or exc}{where}", err=True)
        sys.exit(StoreError.exit_code)
