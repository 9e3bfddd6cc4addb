"""Versions as installed (issue 18 item 1, fidelity rows B12, B13, E7): pins match installed builds
on the public version, the installed build (label and RECORD digest) is keyed and compared at
serve, and the release sets are a table of their own."""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from neuronbuild.engines import versions
from neuronbuild.engines.neuron.releases import TABLE, install_fix, sdk_releases
from neuronbuild.engines.registry import get_engine
from neuronbuild.errors import RecipeInvalid
from neuronbuild.keys import explain_differences
from neuronbuild.orchestrate import compile as build
from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe, parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild_runtime import node_checks
from tests.conftest import NEURON_TOOLCHAIN, REPO, neuron_recipe
from tests.neuron_double import SITE

LABELLED = {
    "neuronx-cc": "2.27.5334.0+f702b353",
    "nki": "0.6.0+31049202112.g85070674",
    "libtorch-neuronx-lite": "2.11.0.1.0.1284+f49d8626",
}
"""What SDK 2.32's wheels report (fidelity row B12)."""


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A private copy of the double's installation, first on ``sys.path`` (edit it freely)."""
    copy = tmp_path / "site"
    shutil.copytree(SITE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(copy))
    importlib.invalidate_caches()
    versions.record_digest.cache_clear()
    yield copy
    versions.record_digest.cache_clear()


def warnings_of(data: dict[str, object]) -> list[str]:
    return parse_recipe(data).warnings


@pytest.mark.parametrize(
    ("pin", "installed", "matches"),
    [
        ("2.27.5334.0", "2.27.5334.0+f702b353", True),  # the SDK's wheel, a base pin
        ("2.27.5334.0+f702b353", "2.27.5334.0+f702b353", True),
        ("2.27.5334.0+f702b353", "2.27.5334.0+0badc0de", False),  # a labelled pin is that build
        ("2.27.5334.0+f702b353", "2.27.5334.0", False),
        ("2.27.5334.0", "2.27.5334.1+f702b353", False),
        ("0.6", "0.6.0+31049202112.g85070674", True),  # PEP 440: 0.6 == 0.6.0
        ("2.27.5334.0", None, False),
        ("not a version", "not a version", True),
        ("not a version", "not-a-version", False),
    ],
)
def test_a_pin_matches_an_installed_build_on_the_public_version_unless_it_is_labelled(
    pin: str, installed: str | None, matches: bool
) -> None:
    assert versions.pin_matches(pin, installed) is matches


def test_the_double_reports_the_labelled_versions_sdk_2_32_installs(site: Path) -> None:
    for dist, version in LABELLED.items():
        assert versions.installed_version(dist) == version
        assert versions.installed_build(dist).startswith(f"{version} sha256:")  # type: ignore[union-attr]


@pytest.mark.slow
def test_compile_accepts_base_and_labelled_pins_against_labelled_builds(site: Path) -> None:
    class Compiler:
        installed_versions = staticmethod(build.UnitCompiler.installed_versions)

    for pins in (NEURON_TOOLCHAIN, {**NEURON_TOOLCHAIN, **LABELLED}):
        recipe = parse_recipe(neuron_recipe(toolchain=dict(pins)))
        installed = build.check_toolchain(recipe, Compiler())  # type: ignore[arg-type]
        assert {d: installed[d] for d in LABELLED} == LABELLED  # recorded with the label


def test_a_toolchain_mismatch_on_a_neuron_host_says_the_real_fix(site: Path) -> None:
    class Compiler:
        installed_versions = staticmethod(build.UnitCompiler.installed_versions)

    recipe = parse_recipe(neuron_recipe(toolchain={**NEURON_TOOLCHAIN, "nki": "0.6.0+0badc0de"}))
    with pytest.raises(build.ToolchainMismatch) as caught:
        build.check_toolchain(recipe, Compiler())  # type: ignore[arg-type]
    message = str(caught.value)
    assert re.search(r"nki +0\.6\.0\+0badc0de +0\.6\.0\+31049202112\.g85070674\n", message)
    assert "make install" not in message
    assert "--extra-index-url=https://pip.repos.neuron.amazonaws.com" in message
    assert "nki==0.6.0+0badc0de" in message and "Neuron 2.32.0" in message


def test_validate_accepts_both_spellings_of_a_release_pin() -> None:
    for pins in (NEURON_TOOLCHAIN, {**NEURON_TOOLCHAIN, **LABELLED}):
        recipe = parse_recipe(neuron_recipe(toolchain=dict(pins)))
        assert not [w for w in recipe.warnings if "toolchain" in w]
    with pytest.raises(RecipeInvalid, match=r"runs with nki 0\.6\.0"):
        parse_recipe(neuron_recipe(toolchain={**NEURON_TOOLCHAIN, "nki": "0.5.0+31049202112"}))


def test_an_unknown_release_warns_naming_what_is_unchecked_instead_of_refusing() -> None:
    """A vllm-neuron the table does not list is planned by the nearest release's rules."""
    toolchain = {"vllm": "0.29.0", "vllm-neuron": "0.29.0.1.0.0", "torch-neuronx": "2.10.0.2.16"}
    [warning] = [w for w in warnings_of(neuron_recipe(toolchain=toolchain)) if "toolchain" in w]
    assert "0.29.0.1.0.0 is not a Neuron SDK release neuronbuild knows" in warning
    assert "planned by the rules of the nearest, Neuron 2.33.1" in warning  # vLLM 0.29
    assert "neuronx-cc, nki not pinned: not checked" in warning
    with pytest.raises(RecipeInvalid, match=r"toolchain\.vllm\b"):
        parse_recipe(neuron_recipe(toolchain={"vllm-neuron": "0.29.0.1.0.0"}))


def test_the_release_table_has_one_well_formed_row_per_release() -> None:
    data = yaml.safe_load((REPO / "neuronbuild" / "data" / TABLE).read_text())
    releases = sdk_releases()
    assert [r.name for r in releases] == [row["name"] for row in data["release"]]
    assert len(releases) >= 5
    for release in releases:
        assert {"vllm", "vllm-neuron", "neuronx-cc", "nki", release.runtime} <= set(
            release.packages
        )
        for dist, shipped in {**release.packages, **release.optional}.items():
            for version in shipped or ():
                assert not versions.is_labelled(version), (release, dist, version)
                assert versions.public_version(version) == version, (release, dist, version)
        # vLLM's version is the first three fields of vllm-neuron's (whats-new.rst line 60).
        plugin, vllm = release.packages["vllm-neuron"], release.packages["vllm"]
        if plugin is not None and vllm is not None:
            assert [p.split(".")[:3] for p in plugin] == [v.split(".") for v in vllm], release
    named = {r.name: r for r in releases}
    # n2-manifest.json (aws-neuron-sdk @81ce03ae) lines 107-131: 2.32.0 and no torch-neuronx.
    assert named["2.32.0"].packages["neuronx-cc"] == {"2.27.5334.0"}
    assert "torch-neuronx" not in named["2.32.0"].all_dists()
    assert set(get_engine("neuron").required_toolchain) <= set(named["2.32.0"].packages)


def test_the_neuron_install_fix_names_the_neuron_pip_repository_never_make_install() -> None:
    fix = install_fix(NEURON_TOOLCHAIN)
    assert "make install" not in fix and "pip.repos.neuron.amazonaws.com" in fix
    assert "vllm-neuron==0.24.0.1.1.0" in fix and "Neuron 2.32.0" in fix
    assert "make install" in get_engine("cpu").toolchain_fix({})


def test_the_record_digest_ignores_what_differs_between_identical_installs(site: Path) -> None:
    record = site / "nki-0.6.0+31049202112.g85070674.dist-info" / "RECORD"
    before = versions.record_digest("nki")
    lines = record.read_text().splitlines()
    edited = [
        line.replace("sha256=", "sha256=X") if "INSTALLER" in line or "/bin/" in line else line
        for line in lines
    ]
    record.write_text("\n".join(reversed(edited)) + "\n")  # order is not meaningful either
    versions.record_digest.cache_clear()
    assert versions.record_digest("nki") == before
    record.write_text(
        "\n".join(lines).replace("nki/isa/__init__.py,sha256=", "nki/isa/__init__.py,sha256=X")
    )
    versions.record_digest.cache_clear()
    assert versions.record_digest("nki") != before


def recorded_truly(site: Path, dist_info: str, path: str) -> None:
    """Rewrite ``path``'s row of ``dist_info``'s RECORD with the true hash of its bytes (the
    double's rows hold made-up ones), as pip writes it: RECORD last."""
    data = (site / path).read_bytes()
    true = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
    record = site / dist_info / "RECORD"
    rows = [
        f"{path},sha256={true},{len(data)}" if row.startswith(f"{path},") else row
        for row in record.read_text().splitlines()
    ]
    record.write_text("\n".join(rows) + "\n")
    versions.record_digest.cache_clear()


def test_a_file_patched_in_place_is_another_build_and_one_touched_unchanged_is_not(
    site: Path,
) -> None:
    """Issue 46 item 8: a hot-fix (``sed -i`` in a container image) leaves RECORD as it was."""
    platform = site / "vllm_neuron" / "platform.py"
    recorded_truly(site, "vllm_neuron-0.24.0.1.1.0.dist-info", "vllm_neuron/platform.py")
    installed = versions.record_digest("vllm-neuron")
    later = (site / "vllm_neuron-0.24.0.1.1.0.dist-info" / "RECORD").stat().st_mtime_ns + 10**9

    os.utime(platform, ns=(later, later))  # touched, bytes unchanged
    versions.record_digest.cache_clear()
    assert versions.record_digest("vllm-neuron") == installed

    original = platform.read_bytes()
    platform.write_bytes(original.replace(b"def ", b"def  ", 1))  # sed -i
    os.utime(platform, ns=(later, later))
    versions.record_digest.cache_clear()
    patched = versions.record_digest("vllm-neuron")
    assert patched != installed

    platform.unlink()  # a hot-fix that deletes a module
    versions.record_digest.cache_clear()
    assert versions.record_digest("vllm-neuron") not in (installed, patched)


def test_an_editable_install_is_keyed_by_its_source(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46 item 8: ``pip install -e`` (how vllm-neuron's docs install it from source) lists
    no source in RECORD; its packages are hashed where the import system finds them."""
    source = tmp_path / "checkout"
    (source / "vllm_neuron" / "__pycache__").mkdir(parents=True)
    (source / "vllm_neuron" / "__init__.py").write_text("")  # a regular package, as installed
    module = source / "vllm_neuron" / "platform.py"
    module.write_text("KERNEL = 1\n")
    shutil.rmtree(site / "vllm_neuron")
    info = site / "vllm_neuron-0.24.0.1.1.0.dist-info"
    (info / "direct_url.json").write_text(
        json.dumps({"dir_info": {"editable": True}, "url": source.as_uri()})
    )
    (info / "top_level.txt").write_text("vllm_neuron\n")
    monkeypatch.syspath_prepend(str(source))
    for name in [n for n in sys.modules if n == "vllm_neuron" or n.startswith("vllm_neuron.")]:
        monkeypatch.delitem(sys.modules, name)  # an earlier test's import: found, not searched
    importlib.invalidate_caches()

    def digest() -> str | None:
        versions.record_digest.cache_clear()
        return versions.record_digest("vllm-neuron")

    (source / "vllm_neuron" / "dangling").symlink_to(source / "nowhere")  # read as unreadable
    first = digest()
    assert first is not None and first == digest()
    (source / "vllm_neuron" / "__pycache__" / "platform.cpython-311.pyc").write_bytes(b"x")
    assert digest() == first  # bytecode is no source
    module.write_text("KERNEL = 2\n")
    assert digest() != first


def patch_vllm_neuron(site: Path) -> None:
    """A locally patched vllm-neuron with an unchanged version: another platform.py hash."""
    record = site / "vllm_neuron-0.24.0.1.1.0.dist-info" / "RECORD"
    record.write_text(record.read_text().replace("platform.py,sha256=", "platform.py,sha256=P"))
    versions.record_digest.cache_clear()


def test_the_installed_build_is_keyed_so_a_patched_plugin_gets_another_key(site: Path) -> None:
    recipe = parse_recipe(neuron_recipe())
    plan = build_plan(recipe)
    factor = plan.units[0].key.factors["installed"]
    assert factor["neuronx-cc"].startswith("2.27.5334.0+f702b353 sha256:")
    assert factor["torch-neuronx"] is None  # observed: the platform's key reads it (row B13)
    patch_vllm_neuron(site)
    patched = build_plan(recipe)
    assert patched.units[0].key.factors["installed"]["vllm-neuron"] != factor["vllm-neuron"]
    assert {u.key.digest for u in patched.units}.isdisjoint(u.key.digest for u in plan.units)
    assert patched.units[0].key.differences(plan.units[0].key.factors) == ["installed"]


def test_serve_names_a_node_whose_build_differs_from_the_compiled_one(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURONBUILD_NODE_TARGET", "trn2")
    recipe = parse_recipe(neuron_recipe())
    factors = dict(build_plan(recipe).units[0].key.factors)
    engine = get_engine("neuron")
    assert node_checks.node_mismatches(recipe, engine, factors, REPO) == []
    patch_vllm_neuron(site)
    (site / "torch_neuronx-2.9.0.dist-info").mkdir()
    (site / "torch_neuronx-2.9.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch-neuronx\nVersion: 2.9.0\n"
    )
    importlib.invalidate_caches()
    found = node_checks.node_mismatches(recipe, engine, factors, REPO)
    assert [m.name for m in found] == ["torch-neuronx", "vllm-neuron"]
    [neuronx, plugin] = found
    assert (neuronx.built_for, neuronx.node) == ("(not installed)", "2.9.0")
    assert plugin.built_for.startswith("0.24.0.1.1.0 sha256:") and plugin.node != plugin.built_for
    with pytest.raises(node_checks.NodeMismatch, match="--allow-mismatch torch-neuronx"):
        node_checks.check_node(recipe, engine, [factors], REPO, {})
    allowed = node_checks.check_node(
        recipe, engine, [factors], REPO, {}, allow=["torch-neuronx", "vllm-neuron"]
    )
    assert len(allowed) == 2


@pytest.mark.slow
def test_a_patched_plugin_recompiles_every_graph_instead_of_reusing_the_old_entries(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The platform's own key ignores a kernel's source (kiln docs/neuron-notes.md): seeding the
    previous build's entries into a patched plugin's run would hit them, stale."""
    from tests.engines.test_neuron_engine import compile_small, setenv, small_recipe

    setenv(monkeypatch, "PYTHONPATH", str(site))
    setenv(monkeypatch, "NEURONBUILD_NEURON_COMPILE_GIB", "0.5")
    recipe = small_recipe(tmp_path, vision=False)
    store = Store(str(tmp_path / "store"), create=True)
    first = compile_small(recipe, store, tmp_path)
    assert first.manifest is not None and first.count("compiled") == 2
    patch_vllm_neuron(site)
    second = compile_small(load_recipe(recipe.source), store, tmp_path)
    assert second.manifest not in (None, first.manifest)
    entries = [u.to_json()["n_entries_by_origin"] for u in second.units]
    assert entries == [{"compiled": 3, "reused": 0}, {"compiled": 4, "reused": 0}]


def test_doctor_explains_an_installed_difference() -> None:
    [why] = explain_differences(["installed.vllm-neuron"], {})
    assert why.startswith("installed: an installed distribution is another build")
