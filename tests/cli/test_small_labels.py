"""The small ones of issue 20: no "1 <plural>" in the product's output, ``isa --json``, a JSON
error's ``errors[]`` without the terminal's ``error: `` label, and ``doctor`` labelling a factor's
value by its real source."""

from __future__ import annotations

import ast
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import UserError
from tests.lib.builders import REPO, neuron_recipe
from tests.lib.commands import neuronbuild_in_process as nb

# "1 <plural>": every counted noun goes through human.count.

PLURALS = frozenset(
    {
        "graphs",
        "units",
        "blobs",
        "entries",
        "files",
        "cores",
        "copies",
        "problems",
        "manifests",
        "records",
        "layouts",
        "workers",
        "shards",
        "refs",
    }
)
"""Nouns a count precedes in the product's messages (``bytes`` stays exact, as --json keeps it)."""


def counted_plurals(path: Path) -> list[str]:
    """Each f-string of ``path`` where a value is followed by `` <plural>`` (``{n} graphs``): it
    says "1 graphs" when the value is 1."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.JoinedStr):
            continue

        for value, after in itertools.pairwise(node.values):
            if not isinstance(value, ast.FormattedValue) or not isinstance(after, ast.Constant):
                continue
            words = str(after.value).split()
            if str(after.value).startswith(" ") and words and words[0].strip(",.;:)") in PLURALS:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {{...}}{after.value[:20]}")
    return found


def test_no_message_of_the_product_counts_a_plural_noun_without_count() -> None:
    files = sorted((REPO / "neuronbuild").rglob("*.py")) + sorted((REPO / "runtime").rglob("*.py"))
    assert [hit for path in files for hit in counted_plurals(path)] == []


def test_a_plan_phase_of_one_graph_is_labelled_in_the_singular(write_recipe: Any) -> None:
    one_prefill = {"num_batched_tokens_buckets": [2048], "kv_segment_size_buckets": [2048]}
    config = {**one_prefill, "num_seqs_buckets": [4, 8]}
    recipe = write_recipe(neuron_recipe(config, max_num_batched_tokens=2048, block_size=128))
    code, out, err = nb("plan", str(recipe), "--json")
    assert code == 0, err
    labels = [unit["label"] for unit in json.loads(out)["units"]]
    assert labels == ["prefill (1 graph)", "decode (2 graphs)"]


def test_a_shard_count_of_one_asks_for_one_copy_of_the_job() -> None:
    from neuronbuild.orchestrate.shard import parse_shard

    with pytest.raises(UserError, match=r"run 1 copy of the job \(completions / array size 1\)"):
        parse_shard("auto/1", {"JOB_COMPLETION_INDEX": "3"})


# isa --json.


def test_isa_prints_its_json_document_with_the_text_output_s_value() -> None:
    from neuronbuild.engines.vllm_cpu.isa import host_isa

    code, out, err = nb("isa", "--json")
    assert code == 0, err
    assert json.loads(out) == {"schema": "neuronbuild.isa/1", "isa": host_isa()}
    assert nb("isa") == (0, f"{host_isa()}\n", "")


# A JSON error's items carry no "error: " label.


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "/nonexistent/recipe.yaml"),  # a recipe's problem: no label
        ("isa", "extra"),  # a usage error click raises
        ("tag", "a", "a/no tag", "--cache", "{store}"),  # a UserError: "error: " on stderr
    ],
)
def test_a_json_errors_items_drop_the_label_the_message_drops(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    (tmp_path / "store").mkdir()
    code, out, err = nb(*(a.format(store=tmp_path / "store") for a in args), "--json")
    document = json.loads(out)
    assert code == document["exit_code"] == 2
    assert document["errors"] == document["error"].split("\n")
    assert not any(line.startswith("error: ") for line in document["errors"])
    assert all(line in err for line in document["errors"])


# doctor labels a factor's value by its source.


def test_doctor_labels_an_environment_value_environment_not_recipe() -> None:
    from neuronbuild.keys import factor_differences

    mine = {"env": {"NEURON_CC_FLAGS": "-O2"}, "engine_args": {"max_num_seqs": 8}}
    mine |= {"installed": {"vllm": "1+a"}, "model_files": "sha256:1"}
    theirs = {"env": {}, "engine_args": {"max_num_seqs": 4}, "installed": {"vllm": "1"}}
    theirs |= {"model_files": "sha256:2"}
    assert factor_differences(mine, theirs) == [
        "engine_args.max_num_seqs: recipe 8, manifest 4",
        'env.NEURON_CC_FLAGS: environment "-O2", manifest null',
        'installed.vllm: this host "1+a", manifest "1"',
        'model_files: model folder "sha256:1", manifest "sha256:2"',
    ]


def test_doctor_prints_a_keyed_variable_s_value_as_the_environment_s(
    tmp_path: Path, write_recipe: Any, started_with: Any
) -> None:
    from neuronbuild.store.cas import Store
    from tests.lib.builders import cpu_recipe, model_folder, publish_build

    store = Store(str(tmp_path / "store"), create=True)
    data = cpu_recipe(cpu_isa="host", model=str(model_folder(tmp_path)))
    started_with(CXX=None)
    publish_build(store, data, tmp_path, "a")
    started_with(CXX="clang++")
    code, out, err = nb("doctor", str(write_recipe(data)), "--cache", store.url)
    assert code == 0, err
    assert '       env.CXX: environment "clang++", manifest null' in out.splitlines()
    assert 'recipe "clang++"' not in out


def test_no_printed_refusal_ends_in_whitespace() -> None:
    """Issue 46 item 13: a message built from parts (a rollback refusal) ended in a space."""
    from neuronbuild.errors import RecipeInvalid, StoreError, message_lines

    for exc in (
        UserError("nothing moved; pass --rollback to move it back "),
        StoreError("s3://b/store: refused\t"),
        RecipeInvalid("recipe.yaml", ["max_model_len: give a number "]),
        FileNotFoundError(2, "No such file or directory ", None),
    ):
        for line in message_lines(exc):
            assert line == line.rstrip(), (exc, line)
