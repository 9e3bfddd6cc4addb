"""The product's import graph, read from its source with :mod:`ast` (nothing is imported).

A *node* is each top-level module of ``neuronbuild/``, each of its sub-packages (``store/``,
``orchestrate/``, ...) and the runtime (``runtime/``, imported as ``neuronbuild_runtime``). An *arrow*
``a -> b`` says some module of ``a`` imports some module of ``b`` when it runs: imports inside
functions count, ``if TYPE_CHECKING:`` blocks do not. ``python -m tests.lib.imports`` prints the
counts the layout issue (17) compares: nodes, arrows, cycles, upward arrows.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "neuronbuild"
RUNTIME = REPO / "runtime"

KERNEL = frozenset(
    {"errors", "envs", "start_env", "folders", "paths", "digest", "human", "notices", "user_files"}
)
"""Imported by every wing; imports nothing above it (DESIGN.md, "Repository layout")."""

WORDS = frozenset({"keys", "graph", "model_files", "data/", "schemas/"})
"""The vocabulary every layer above the kernel shares: unit keys, graphs, model files, the
checked-in tables of vLLM and the ``--json`` shapes."""

READINGS = frozenset({"recipe", "plan"})
"""The vocabulary that reads a recipe through the engines' rules (so it stands above them)."""

RANK = {
    **dict.fromkeys(KERNEL, 0),
    **dict.fromkeys(WORDS, 1),
    "engines/": 2,
    "transports/": 2,
    "store/": 2,
    **dict.fromkeys(READINGS, 3),
    "attest/": 3,
    "node/": 3,  # a manifest laid out where vLLM looks: reads the store
    "image/": 3,  # a manifest as an OCI image: reads the store, pushes to a registry
    "orchestrate/": 4,
    "ui/": 4,
    "cli/": 5,
    "runtime": 5,
    "demo/": 6,
}
"""Each node's layer: an arrow may point to its own layer or one below, never above. A node
missing here fails the shape test until it is given a place."""

EDGES = frozenset({"cli/", "runtime", "demo/"})
"""The only nodes that may import :mod:`neuronbuild.ui` (besides ``ui/`` itself)."""


def runtime_imports(path: Path) -> set[str]:
    """The dotted modules ``path`` imports when it runs (relative imports resolved; names
    imported from a module counted as ``module.name`` too, since they may be submodules)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for stmt in block.body
        for node in ast.walk(stmt)
    }
    package: list[str] = []  # a script's (bench/) relative imports resolve to nothing of ours
    for top, root in (("neuronbuild_runtime", RUNTIME), ("neuronbuild", PACKAGE)):
        if path.is_relative_to(root):
            package = [top, *path.relative_to(root).parts[:-1]]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def product_files() -> Iterator[Path]:
    """Every Python file of ``neuronbuild/`` and ``runtime/``."""
    yield from sorted(PACKAGE.rglob("*.py"))
    yield from sorted(RUNTIME.rglob("*.py"))


def node_of_file(path: Path) -> str | None:
    """The node ``path`` belongs to (None for the root package's ``__init__``/``__main__``)."""
    if path.is_relative_to(RUNTIME):
        return "runtime"
    parts = path.relative_to(PACKAGE).parts
    if len(parts) > 1:
        return parts[0] + "/"
    return None if parts[0] in ("__init__.py", "__main__.py") else parts[0].removesuffix(".py")


def node_of_module(module: str) -> str | None:
    """The node a dotted module belongs to (None outside the product)."""
    parts = module.split(".")
    if parts[0] == "neuronbuild_runtime":
        return "runtime"
    if parts[0] != "neuronbuild" or len(parts) == 1:
        return None
    if (PACKAGE / parts[1]).is_dir():
        return parts[1] + "/"
    return parts[1] if (PACKAGE / f"{parts[1]}.py").exists() else None


def package_graph() -> tuple[set[str], set[tuple[str, str]]]:
    """The nodes and arrows of the product (an arrow never points at its own node)."""
    nodes: set[str] = set()
    arrows: set[tuple[str, str]] = set()
    for path in product_files():
        source = node_of_file(path)
        if source is None:
            continue
        nodes.add(source)
        for module in runtime_imports(path):
            target = node_of_module(module)
            if target is not None and target != source:
                arrows.add((source, target))
                nodes.add(target)
    return nodes, arrows


def cycles(nodes: set[str], arrows: set[tuple[str, str]]) -> list[list[str]]:
    """The import cycles: each strongly connected component of more than one node (Tarjan)."""
    after: dict[str, list[str]] = {n: sorted(b for a, b in arrows if a == n) for n in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in after[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return found


def upward(arrows: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The arrows that point to a higher layer than their own (:data:`RANK`)."""
    return sorted((a, b) for a, b in arrows if RANK.get(b, 99) > RANK.get(a, 99))


def main() -> None:
    """Print the counts: nodes, arrows, cycles and upward arrows, then each cycle and upward
    arrow (``-v``: every arrow)."""
    nodes, arrows = package_graph()
    found, up = cycles(nodes, arrows), upward(arrows)
    print(f"{len(nodes)} nodes, {len(arrows)} arrows, {len(found)} cycles, {len(up)} upward")
    for cycle in found:
        print("cycle:", " ".join(cycle))
    for a, b in up:
        print(f"upward: {a} -> {b}")
    if "-v" in sys.argv:
        for a, b in sorted(arrows):
            print(f"{a} -> {b}")


if __name__ == "__main__":
    main()
