"""The environment section of ``compile --help`` and ``serve --help``: which variables each engine
keys at compile (the build's value is used at serve), passes through as node-local, drops or
refuses at serve, generated from the engines' own classifications (never a hand-kept list)."""

from __future__ import annotations

import click

ENV_HELP_CLASSES = ("keyed", "node-local", "dropped", "refused-at-serve")
"""The classes the section lists, in order (:class:`~neuronbuild.engines.env_classes.EnvClass`
values)."""


def environment_help() -> list[tuple[str, list[str]]]:
    """``(whose, paragraphs)`` per engine, then for vLLM's own variables: one paragraph per class
    that has names, ``class (what happens): NAME, NAME, PREFIX*.``"""
    from neuronbuild.engines.env_classes import (
        AT_COMPILE_AND_SERVE,
        EnvClass,
        class_label,
        vllm_env_classification,
    )
    from neuronbuild.engines.registry import engine_names, get_engine

    tables = [(f"{n} engine", get_engine(n).env_classification()) for n in engine_names()]
    tables.append(("vLLM's own variables, for every engine", vllm_env_classification()))
    out = []
    for whose, table in tables:
        paragraphs = []
        for value in ENV_HELP_CLASSES:
            env_class = EnvClass(value)
            if table[env_class]:
                what = f"{class_label(env_class)} ({AT_COMPILE_AND_SERVE[env_class]})"
                paragraphs.append(f"{what}: {', '.join(table[env_class])}.")
        out.append((whose, paragraphs))
    return out


class EnvHelpCommand(click.Command):
    """A command whose ``--help`` ends with the environment section (:func:`environment_help`),
    built only when help is shown."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        with formatter.section("Environment (an engine's own class of a variable wins)"):
            for whose, paragraphs in environment_help():
                formatter.write_text(f"{whose}:")
                with formatter.indentation():
                    for paragraph in paragraphs:
                        formatter.write_text(paragraph)
