"""``compile --help`` and ``serve --help`` say, per engine, which variables are keyed at compile
(the build's value is used at serve) and which are node-local, generated from the engines'
classifications (issue 20); a warning about a variable names its class and what happens."""

from __future__ import annotations

import pytest

from neuronbuild.engines.env_classes import EnvClass
from neuronbuild.engines.registry import get_engine
from neuronbuild.engines.vllm_cpu.engine import CpuEngine
from tests.lib.commands import neuronbuild_in_process as nb

HEADINGS = ("cpu engine:", "neuron engine:", "vLLM's own variables, for every engine:")


def environment_of(command: str) -> dict[str, dict[str, str]]:
    """``COMMAND --help``'s environment section: per heading, per class, its text (one line)."""
    code, out, err = nb(command, "--help")
    assert code == 0, err
    text = " ".join(out.split("\nEnvironment (")[1].split())
    sections: dict[str, dict[str, str]] = {}
    for i, heading in enumerate(HEADINGS):
        end = text.index(HEADINGS[i + 1]) if i + 1 < len(HEADINGS) else len(text)
        body = text[text.index(heading) + len(heading) : end]
        classes: dict[str, str] = {}
        for label in ("refused at serve (", "dropped (", "node-local (", "keyed ("):
            if label in body:
                body, _, classes[label[:-2]] = body.rpartition(label)
        sections[heading[:-1]] = classes
    return sections


def names(paragraph: str) -> list[str]:
    """The variable names a class's paragraph lists (after its ``(what happens):``)."""
    return paragraph.split("): ", 1)[1].strip().rstrip(".").split(", ")


@pytest.mark.parametrize("command", ["compile", "serve"])
def test_help_lists_each_engine_s_keyed_and_node_local_variables(command: str) -> None:
    section = environment_of(command)
    for engine in ("cpu", "neuron"):
        table = get_engine(engine).env_classification()
        listed = section[f"{engine} engine"]
        assert names(listed["keyed"]) == table[EnvClass.KEYED]
        assert names(listed["node-local"]) == table[EnvClass.NODE_LOCAL]
        assert listed["keyed"].startswith("it enters every unit key at compile, and at serve the ")
    assert "NEURON_CC_FLAGS" in names(section["neuron engine"]["keyed"])
    assert "NEURON_RT_LOG_LEVEL" in names(section["neuron engine"]["node-local"])
    vllm = section["vLLM's own variables, for every engine"]
    assert {"VLLM_CPU_OMP_THREADS_BIND", "VLLM_RAY_BUNDLE_INDICES"} <= set(names(vllm["keyed"]))
    assert "VLLM_LOGGING_LEVEL" in names(vllm["node-local"])
    assert names(vllm["refused at serve"]) == ["VLLM_DISABLE_COMPILE_CACHE"]


def test_help_follows_the_classification_when_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    classes = {
        **CpuEngine.env_classes,
        "NB_TEST_KEYED": EnvClass.KEYED,
        "VLLM_RAY_BUNDLE_INDICES": EnvClass.NODE_LOCAL,  # moved out of vLLM's keyed class
    }
    monkeypatch.setattr(CpuEngine, "env_classes", classes)
    for command in ("compile", "serve"):
        cpu = environment_of(command)["cpu engine"]
        assert "NB_TEST_KEYED" in names(cpu["keyed"])
        assert "VLLM_RAY_BUNDLE_INDICES" in names(cpu["node-local"])
        assert "VLLM_RAY_BUNDLE_INDICES" not in names(cpu["keyed"])


def test_a_warning_names_the_variable_s_class_and_what_happens_to_it() -> None:
    engine = get_engine("cpu")
    environ = {"VLLM_RAY_BUNDLE_INDICES": "0,1", "VLLM_NCCL_SO_PATH": "/x.so"}
    assert engine.env_warnings(environ, built={}) == [
        "VLLM_NCCL_SO_PATH is not passed to the engine (dropped: kept from the engine at compile "
        "and at serve, since it would change vLLM's output unkeyed)",
        "VLLM_RAY_BUNDLE_INDICES is replaced by the build's value (unset); it is keyed: it enters "
        "every unit key at compile, and at serve the build's value replaces the node's (compile "
        "with this value to serve it)",
    ]
    [refused] = engine.env_warnings({"VLLM_DISABLE_COMPILE_CACHE": "1"})
    assert refused.startswith(
        "VLLM_DISABLE_COMPILE_CACHE is not passed to the engine (refused at serve: serve exits 2"
    )
