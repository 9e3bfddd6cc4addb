"""What several commands share: reading a recipe and printing its warnings."""

from __future__ import annotations

from neuronbuild import start_env
from neuronbuild.recipe import Recipe, load_recipe
from neuronbuild.ui.verbosity import info


def warn(message: str) -> None:
    """Print ``warning: MESSAGE`` on stderr: a note beside a command's result, so ``-q`` drops
    it (``validate`` prints its warnings itself: they are its result)."""
    info(f"warning: {message}", err=True)


def load_or_exit(path: str) -> Recipe:
    """Load and validate the recipe at ``path`` and print its warnings (:func:`warn`).

    Raises:
        RecipeInvalid: every problem of the recipe, one per field; the CLI edge prints them and
            exits 2 (:mod:`neuronbuild.ui.console`).
    """
    recipe = load_recipe(path)
    for w in recipe.warnings:
        warn(f"{path}: {w}")
    return recipe


def warn_removed_env(recipe: Recipe) -> None:
    """Name every variable of the user's environment kept from the engine process."""
    from neuronbuild.engines.registry import engine_for

    for line in engine_for(recipe).env_warnings(start_env.environ()):
        warn(line)
