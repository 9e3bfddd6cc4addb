"""The shape of the house (DESIGN.md, "Repository layout"): no import cycle between packages, a
kernel that imports nothing above it, layers that only look down, a terminal layer (``ui/``) that
only the command line, the runtime and the demo import, a top level that holds only the kernel and
the vocabulary, and package faces that import nothing. Read from the source
(:mod:`tests.lib.imports`), so a new arrow fails here before it ships."""

from __future__ import annotations

from tests.lib import imports
from tests.lib.imports import PACKAGE, RANK, package_graph


def test_no_import_cycle_between_packages() -> None:
    nodes, arrows = package_graph()
    assert imports.cycles(nodes, arrows) == []


def test_every_node_has_a_layer() -> None:
    nodes, _ = package_graph()
    assert sorted(n for n in nodes if n not in RANK) == [], "give each new module a layer in RANK"


def test_no_arrow_points_to_a_higher_layer() -> None:
    _, arrows = package_graph()
    assert imports.upward(arrows) == []


def test_the_kernel_imports_only_the_kernel() -> None:
    _, arrows = package_graph()
    assert (
        sorted((a, b) for a, b in arrows if a in imports.KERNEL and b not in imports.KERNEL) == []
    )


def test_only_the_edges_import_the_terminal_layer() -> None:
    _, arrows = package_graph()
    allowed = imports.EDGES | {"ui/"}
    assert sorted(a for a, b in arrows if b == "ui/" and a not in allowed) == []


def test_the_top_level_holds_only_the_kernel_and_the_vocabulary() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert sorted(modules - imports.KERNEL - imports.WORDS - imports.READINGS) == []


def test_every_package_face_imports_nothing_of_ours() -> None:
    faces = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        ours = sorted(m for m in imports.runtime_imports(init) if m.startswith("neuronbuild"))
        if init.parent == PACKAGE:  # the root snapshots the user's environment first
            ours = [m for m in ours if not m.startswith("neuronbuild.start_env")]
            ours = [m for m in ours if m != "neuronbuild"]
        faces[str(init.relative_to(PACKAGE.parent))] = ours
    assert {face: ours for face, ours in faces.items() if ours} == {}


def test_the_reader_sees_arrows_and_cycles() -> None:
    """The checks above mean something only if the reader finds arrows: a cycle made on purpose
    is found, and the real graph has the arrows every layer is known to have."""
    assert imports.cycles({"a", "b", "c"}, {("a", "b"), ("b", "a"), ("b", "c")}) == [["a", "b"]]
    _, arrows = package_graph()
    assert {
        ("store/", "digest"),
        ("cli/", "ui/"),
        ("runtime", "store/"),
        ("recipe", "engines/"),
    } <= arrows
    assert imports.upward({("digest", "ui/")}) == [("digest", "ui/")]
