"""One value for every argument: what ``validate`` accepts, ``serve``'s argv gives back to vLLM's own
parser (the installed CPU build's ``make_arg_parser``) as the very value ``compile`` hands vLLM's
Python API; what it refuses, vLLM's parser refuses or reads as another value."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from neuronbuild.data.vllm_data import arg_types, engine_arg_defaults, engine_arg_names
from neuronbuild.engines.vllm_args import ONE_OR_MANY, value_problem, vllm_cli_args
from tests.lib.properties import examples

pytestmark = pytest.mark.slow  # imports vLLM (about 15 s)

ARGS = sorted(n for n in arg_types() if n in engine_arg_names() and n != "model")
"""Engine arguments vLLM's server takes on its command line."""

FAILED: Any = object()


@pytest.fixture(scope="module")
def parse() -> Any:
    pytest.importorskip("vllm")
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())

    def parse(name: str, value: Any) -> Any:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                namespace = parser.parse_args(vllm_cli_args({name: value}))
        except (SystemExit, Exception):  # argparse refuses: exit 2
            return FAILED
        return getattr(namespace, name, None)  # an option whose default is SUPPRESS

    return parse


def same(name: str, parsed: Any, value: Any) -> bool:
    """Whether vLLM ends with one value: equal (7 == 7.0), a config object built from the
    mapping, or the text vLLM's config turns into its default's type (``optimization_level``)."""
    if parsed is FAILED or isinstance(parsed, bool) != isinstance(value, bool):
        return False  # False == 0 in Python, not to vLLM
    if parsed == value:
        return True
    if isinstance(parsed, str) and type(engine_arg_defaults().get(name)) is type(value):
        return parsed == str(value)  # vLLM's config turns the text into its default's type
    if name in ONE_OR_MANY and parsed == [value]:
        return True  # EngineArgs takes either
    if isinstance(value, dict) and not isinstance(parsed, dict | list | str | float | int | None):
        with contextlib.suppress(Exception):  # the config vLLM builds from the API's mapping
            type(parsed)(**value)
            return True
    return False


def sample(name: str) -> list[Any]:
    """One value of each kind the argument takes (its first choice where it has choices)."""
    spec = arg_types()[name]
    first = spec.choices[:1]
    table = {
        "bool": [True, False],
        "int": list(first) or [7],
        "float": [0.5],
        "str": list(first) or ["abc"],
        "array": [[1, 2]],
        "object": [{}],
    }
    many = name in {"cudagraph_capture_sizes"} or value_problem(name, [table["int"][0]]) is None
    values = [v for kind in sorted(spec.kinds) for v in table[kind]]
    return [[v] if many and not isinstance(v, list) else v for v in values]


@pytest.mark.parametrize("name", ARGS)
def test_each_kind_an_argument_takes_round_trips_through_vllms_parser(
    parse: Any, name: str
) -> None:
    for value in sample(name):
        if value_problem(name, value) is None:
            assert same(name, parse(name, value), value), (
                name,
                value,
                vllm_cli_args({name: value}),
            )


VALUES = st.one_of(
    st.booleans(),
    st.integers(-3, 1 << 40),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["", "None", "auto", "abc", "4096", "1k", "true", "-x", "{}", "[1]"]),
    st.lists(st.integers(0, 64), max_size=3),
    st.lists(st.sampled_from(["a", "b"]), max_size=2),
    st.just({}),  # a mapping's fields are its vLLM config's to check (at compile and serve alike)
)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(ARGS), value=VALUES)
# Found by CI: JSON text in a string, which vLLM's CLI reads as the mapping, compile as the text.
@example(name="additional_config", value="{}")
@example(name="default_mm_loras", value="{}")
@example(name="hf_overrides", value=' {"a": 1}\n')
def test_validate_accepts_only_what_vllms_parser_gives_back_and_refuses_each_other_kind(
    parse: Any, name: str, value: Any
) -> None:
    problem = value_problem(name, value)
    if problem is None:
        assert same(name, parse(name, value), value), (name, value, vllm_cli_args({name: value}))
    elif problem.startswith(("must be", "each item")):  # a kind or choice vLLM reads otherwise
        assert not same(name, parse(name, value), value), (name, value, problem)
    # Else validate is stricter than the parser: "" and "None" (which vLLM's optional types
    # read as unset) and text a choice option's parser lets through.
