"""The ``neuronbuild`` command line (its commands in :mod:`neuronbuild.cli.build` for now)."""

from neuronbuild.cli.build import cli, main

__all__ = ["cli", "main"]
