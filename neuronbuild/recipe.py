"""Load a recipe YAML into a :class:`Recipe`: key checks, types, and the engine's own rules.

A recipe is vLLM's engine arguments under their own names (the pinned vLLM's list is checked in as
``data/vllm_engine_args.txt``) plus neuronbuild's few keys (:data:`OWN_KEYS`) and the keys its
engine owns (the registry's ``fields``, e.g. ``cpu_isa``). Every problem is
collected and raised together as one :class:`~neuronbuild.errors.RecipeInvalid`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)
from pydantic_core import PydanticCustomError

from neuronbuild.data.vllm_data import (
    ArgTables,
    arg_types,
    engine_arg_names,
    env_vars,
    server_options,
)
from neuronbuild.engines.arg_classes import SERVING_ONLY_ARGS
from neuronbuild.engines.arg_sources import ArgSource
from neuronbuild.engines.registry import (
    ENGINES,
    engine_fields,
    engine_for,
    engine_names,
    get_engine,
    target_engines,
)
from neuronbuild.engines.vllm_args import value_problem
from neuronbuild.errors import MISSING, NOT_A_VALUE, RecipeError, RecipeInvalid, did_you_mean
from neuronbuild.human import size
from neuronbuild.keys import canonical_json
from neuronbuild.user_files import DuplicateKeys, Unreadable, load_yaml_unique, read_bounded

OWN_KEYS = ("name", "target", "engine", "toolchain", "serve")
"""Recipe keys that are neuronbuild's, not vLLM's, whatever the engine (``serve``: options of
vLLM's server that ``serve`` passes and keys ignore); an engine's own keys come from its registry
row (:func:`own_keys`)."""

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""A recipe name is one path segment of a ref (``<name>/<tag>``)."""

EXACT_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]*$")

MAX_TOKENS = 1 << 24
"""Most tokens a length or token budget may name (16,777,216): above the longest context a
released model takes (10M tokens), far below what would overflow a buffer's size."""
MAX_SEQS = 1 << 20
"""Most sequences one engine step may batch (``max_num_seqs``)."""
MAX_DEVICES = 1 << 16
"""Most devices one tensor-parallel group may span."""
MAX_SEED = (1 << 32) - 1
"""Largest seed vLLM can use: ``set_random_seed`` (vllm/utils/torch_utils.py) calls
``np.random.seed``, which takes 0 to 2**32 - 1."""
MAX_INT = (1 << 63) - 1
"""Largest integer any engine argument may hold (int64, what torch and vLLM's C++ side take)."""


class _Fields(BaseModel):
    """Types of the keys neuronbuild itself interprets; other engine args pass through verbatim."""

    model_config = ConfigDict(extra="ignore")

    name: StrictStr = Field(pattern=NAME_PATTERN)
    target: StrictStr
    engine: StrictStr | None = None
    toolchain: dict[StrictStr, StrictStr] = {}
    model: StrictStr = Field(min_length=1)
    revision: StrictStr | None = None
    tensor_parallel_size: StrictInt = Field(default=1, gt=0, le=MAX_DEVICES)
    max_model_len: StrictInt = Field(gt=0, le=MAX_TOKENS)
    max_num_seqs: StrictInt = Field(gt=0, le=MAX_SEQS)
    max_num_batched_tokens: StrictInt | None = Field(default=None, gt=0, le=MAX_TOKENS)
    block_size: StrictInt | None = Field(default=None, gt=0, le=MAX_TOKENS)
    seed: StrictInt | None = Field(default=None, ge=0, le=MAX_SEED)
    mm_encoder_only: StrictBool = False

    @field_validator("target", mode="before")
    @classmethod
    def _a_known_target(cls, value: Any) -> Any:
        return _one_of(value, tuple(target_engines()))

    @field_validator("engine", mode="before")
    @classmethod
    def _a_known_engine(cls, value: Any) -> Any:
        return None if value is None else _one_of(value, engine_names())


def _one_of(value: Any, names: tuple[str, ...]) -> Any:
    """``value`` when it is one of ``names`` (the registry's, read when a recipe is checked, so a
    registered engine's targets count), judged before its type, as a ``Literal`` field was.

    Raises:
        PydanticCustomError: a ``literal_error`` naming them, as a ``Literal`` field would.
    """
    if value in names:
        return value
    quoted = [repr(n) for n in names]
    expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    raise PydanticCustomError("literal_error", "must be one of {expected}", {"expected": expected})


def own_keys() -> tuple[str, ...]:
    """Every recipe key that is not a vLLM engine argument: :data:`OWN_KEYS` and each engine's own
    (:func:`~neuronbuild.engines.registry.engine_fields`)."""
    return (*OWN_KEYS, *engine_fields())


PLACEHOLDERS: dict[str, Any] = {
    "name": "recipe",
    "revision": None,
}
"""Stand-ins for mistyped keys, so the engine's rules still run and every error is reported
(:func:`parse_recipe`); the rules' errors about a key stood in are left out."""

STAND_INS: dict[str, Any] = {
    "model": "org/model",
    "max_model_len": 4096,
    "max_num_seqs": 8,
}
"""Stand-ins for the required engine arguments when one is missing or mistyped (any other key of
:class:`_Fields` stands in with its default)."""

CROSS_CHECKED = frozenset(
    {
        "tensor_parallel_size",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
        "seed",
        "mm_encoder_only",
    }
)
"""The typed engine arguments other rules compare with: a rule's error that names one stood in
(in its hint) judged the stand-in, and is left out."""

_PYDANTIC_HINTS = {
    "missing": "is required; add it to the recipe",
    "literal_error": "must be one of {expected}",
    "string_pattern_mismatch": "must be one path segment of letters, digits, '.', '_' or '-'",
    "int_type": "must be an integer, written without quotes",
    "string_type": "must be a string; put it in quotes",
    "bool_type": "must be true or false",
    "dict_type": "must be a mapping",
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
    "too_short": "cannot be empty",
    "string_too_short": "cannot be empty",
}


def _pydantic_errors(exc: ValidationError, data: Mapping[str, Any]) -> list[RecipeError]:
    errors = []
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        value: Any = data
        for part in err["loc"]:
            value = value.get(part, MISSING) if isinstance(value, Mapping) else MISSING
        hint = _PYDANTIC_HINTS.get(err["type"], err["msg"].lower().replace("input ", "must "))
        if err["type"] in (
            "literal_error",
            "greater_than",
            "greater_than_equal",
            "less_than_equal",
        ):
            hint = hint.format(**err.get("ctx", {}))
        errors.append(RecipeError(".".join(loc), value, hint))
    return errors


@dataclass(frozen=True)
class Recipe:
    """A validated recipe.

    ``engine_args`` holds vLLM's engine arguments exactly as the recipe gives them, with
    ``additional_config`` parsed to a mapping when the recipe pasted it as a JSON string.
    ``fields`` holds the keys its engine owns (its registry row's ``fields``, e.g. ``cpu_isa``)
    that the recipe sets, as given: the engine's rules type them.
    ``warnings`` lists keys vLLM-Neuron may know but the pinned reference does not. ``serve``
    holds the recipe's ``serve:`` section: options of vLLM's server by their ``dest`` names,
    serving-only, passed by ``serve`` and left out of every key.
    """

    name: str
    target: str
    engine: str
    toolchain: dict[str, str]
    engine_args: dict[str, Any]
    fields: dict[str, Any] = field(default_factory=dict)
    source: str = "<recipe>"
    warnings: tuple[str, ...] = field(default=())
    serve: dict[str, Any] = field(default_factory=dict)
    host_warnings: tuple[str, ...] = field(default=())
    """The :attr:`warnings` about this host rather than the recipe (no table of the pinned vLLM
    here to check its arguments with, no config of a hub model here to plan from):
    ``validate --strict`` does not make them errors, so a trn2 recipe can pass it on a CPU-only
    CI host."""

    @property
    def model(self) -> str:
        return str(self.engine_args["model"])

    @property
    def max_model_len(self) -> int:
        return int(self.engine_args["max_model_len"])

    @property
    def max_num_seqs(self) -> int:
        return int(self.engine_args["max_num_seqs"])

    @property
    def additional_config(self) -> dict[str, Any]:
        value = self.engine_args.get("additional_config") or {}
        return dict(value)

    @property
    def workdir(self) -> Path:
        """The folder vLLM runs in: the recipe file's, so that a relative ``model`` path resolves
        alike at compile and at serve while vLLM, whose keys include the string, sees it verbatim.
        """
        source = Path(self.source)
        return source.parent.resolve() if source.is_file() else Path.cwd()

    def own_fields(self) -> dict[str, Any]:
        """neuronbuild's keys of this recipe, as they would be written back to YAML."""
        out: dict[str, Any] = {"name": self.name, "target": self.target, "engine": self.engine}
        out.update(self.fields)
        out["toolchain"] = dict(self.toolchain)
        if self.serve:
            out["serve"] = dict(self.serve)
        return out

    def canonical(self) -> dict[str, Any]:
        """The whole recipe as one JSON-ready mapping (own keys, then engine args)."""
        return {**self.own_fields(), **self.engine_args}


def _check_keys(data: Mapping[str, Any], tables: ArgTables | None) -> list[RecipeError]:
    """Keys that are neither neuronbuild's nor an engine argument of the vLLM ``tables`` were
    read from (the shipped list when no table fits the recipe's vLLM)."""
    known = set(own_keys()) | _engine_arg_names(tables)
    errors = []
    for key in data:
        if key in known:
            continue
        if key == "mm_language_model_only":
            hint = (
                "vLLM has no such engine argument; it belongs at the top level of "
                "additional_config (additional_config.mm_language_model_only)"
            )
        elif (close := did_you_mean(str(key), list(known))) is not None:
            hint = f"unknown key; did you mean '{close}'?"
        else:
            hint = (
                "unknown key: not an engine argument of the pinned vLLM nor one of "
                f"neuronbuild's ({', '.join(own_keys())}); remove it"
            )
        errors.append(RecipeError(str(key), NOT_A_VALUE, hint))
    return errors


CREDENTIAL_WORDS = frozenset({"key", "token", "secret", "password", "credentials"})
"""The last word of a vLLM option whose string value is a credential (``api_key``,
``hf_token``): the rule :func:`credential_args` applies to vLLM's own argument table."""


def credential_args(tables: ArgTables | None = None) -> frozenset[str]:
    """The options (by ``dest``) of vLLM's server whose value is a credential, read from its
    argument table (``tables``, else the shipped one): a string option whose name ends in one
    of :data:`CREDENTIAL_WORDS` (``api_key``, ``hf_token``; not ``ssl_keyfile``, a path)."""
    types = arg_types() if tables is None else tables.types
    return frozenset(
        dest
        for dest, kind in types.items()
        if dest.rsplit("_", 1)[-1] in CREDENTIAL_WORDS and "str" in kind.kinds
    )


def credential_variable(option: str) -> str | None:
    """The environment variable that holds a credential option of vLLM (``api_key``,
    ``--api-key``, ``hf_token``) instead: ``VLLM_<DEST>`` where vLLM's own table of variables
    has it, ``HF_TOKEN`` for a hub token (vLLM hands it to huggingface_hub, which reads that);
    None where none is known."""
    dest = option.lstrip("-").replace("-", "_")
    if f"VLLM_{dest.upper()}" in env_vars():
        return f"VLLM_{dest.upper()}"
    return "HF_TOKEN" if dest.startswith("hf_") else None


def credential_hint(option: str) -> str:
    """Where a credential option of vLLM goes instead (:func:`credential_variable`), as a phrase:
    "set VLLM_API_KEY in the node's environment (vLLM reads it)"."""
    variable = credential_variable(option)
    if variable == "HF_TOKEN":
        return "set HF_TOKEN where the model is fetched (huggingface_hub reads it)"
    if variable:
        return f"set {variable} in the node's environment (vLLM reads it)"
    return "give it through the environment of the host that needs it"


def _credential_errors(data: Mapping[str, Any], tables: ArgTables | None) -> list[RecipeError]:
    """A credential (:func:`credential_args`) at the top level or in ``serve:`` is refused (a
    value that names none, such as ``hf_token: true``, vLLM's "use the stored login", goes): a
    recipe is stored verbatim in the manifest, its signed Statement and node images, and
    printed by ``serve --dry-run``. The hint names vLLM's environment variable for it
    (``VLLM_API_KEY``), where vLLM has one."""
    secret = credential_args(tables)

    def held(section: Mapping[str, Any]) -> list[Any]:  # ``hf_token: true`` names no secret
        return [k for k, v in section.items() if str(k).replace("-", "_") in secret and v]

    serve = data.get("serve")
    found = [(str(k), k) for k in held(data)]
    if isinstance(serve, Mapping):
        found += [(f"serve.{k}", k) for k in held(serve)]
    errors = []
    for where, key in found:
        on_node = credential_hint(str(key))
        errors.append(
            RecipeError(
                where,
                NOT_A_VALUE,
                "a credential is never kept in a recipe (it would be stored in the manifest, "
                f"its signature and node images); remove it (a build sealed with it: compile "
                f"again) and {on_node}",
            )
        )
    return errors


def _engine_arg_names(tables: ArgTables | None) -> set[str]:
    return set(engine_arg_names() if tables is None else tables.defaults)


def check_serve_section(
    value: Any, serving_only: frozenset[str], tables: ArgTables | None = None
) -> list[RecipeError]:
    """The ``serve:`` section: a mapping of vLLM server options (by ``dest``, e.g.
    ``chat_template``) that cannot change what was compiled: frontend options and the engine
    arguments in ``serving_only``; names and values judged by ``tables``, the vLLM's the recipe
    pins (the shipped ones when None)."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [RecipeError("serve", value, "must be a mapping of vLLM server options")]
    dests = {o.dest for o in (server_options() if tables is None else tables.options).values()}
    engine_args = _engine_arg_names(tables)
    errors = []
    for key in value:
        name = str(key).replace("-", "_")
        if name in engine_args and name not in serving_only:
            errors.append(
                RecipeError(
                    f"serve.{key}",
                    value[key],
                    "changes what is compiled, so it enters the unit key; move it to the top "
                    "level of the recipe",
                )
            )
        elif name not in dests:
            close = did_you_mean(name, sorted(dests))
            hint = f"did you mean '{close}'?" if close else "remove it"
            errors.append(
                RecipeError(f"serve.{key}", value[key], f"not an option of vLLM's server; {hint}")
            )
        elif tables is not None and (problem := value_problem(name, value[key], tables)):
            errors.append(RecipeError(f"serve.{key}", value[key], problem))
    return errors


def _huge_ints(value: Any, path: str) -> list[RecipeError]:
    """An error for each integer under ``value`` outside int64 (:data:`MAX_INT`)."""
    if isinstance(value, Mapping):
        return [e for k, v in value.items() for e in _huge_ints(v, f"{path}.{k}")]
    if isinstance(value, list | tuple):
        return [e for i, v in enumerate(value) for e in _huge_ints(v, f"{path}[{i}]")]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        return [RecipeError(path, value, f"must be between -{MAX_INT} and {MAX_INT}")]
    return []


def _value_errors(
    args: Mapping[str, Any], tables: ArgTables | None, reported: Iterable[RecipeError] = ()
) -> list[RecipeError]:
    """Engine arguments whose value vLLM's command line would not give back as it is (see
    :func:`~neuronbuild.engines.vllm_args.value_problem`, judged by ``tables``, none when no
    table fits the recipe's vLLM), and integers outside int64; the keys :class:`_Fields` types
    are left to it, and so are those an error in ``reported`` names (one line per field)."""
    errors = []
    skip = {*_Fields.model_fields, *(e.field for e in reported)}
    for key, value in args.items():
        if key in skip:
            continue  # typed there (with their ranges), or already reported
        problem = None if tables is None else value_problem(str(key), value, tables)
        if problem is not None:
            errors.append(RecipeError(str(key), value, problem))
        else:
            errors += _huge_ints(value, str(key))
    return errors


def _parse_additional_config(args: dict[str, Any]) -> list[RecipeError]:
    """Accept ``additional_config`` as a mapping or as the ``--additional-config`` JSON string."""
    value = args.get("additional_config")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return [
                RecipeError(
                    "additional_config",
                    args["additional_config"][:60],
                    f"is not valid JSON ({exc.msg} at column {exc.colno}); "
                    "paste the --additional-config JSON or write it as YAML",
                )
            ]
        args["additional_config"] = value
    if value is not None and not isinstance(value, dict):
        return [RecipeError("additional_config", value, "must be a mapping (a JSON object)")]
    return []


def _json_errors(args: Mapping[str, Any]) -> list[RecipeError]:
    """Engine arguments whose value is no plain JSON data (a key cannot be computed over it)."""
    errors = []
    for key, value in args.items():
        try:
            canonical_json(value)
        except (TypeError, ValueError):
            errors.append(
                RecipeError(
                    str(key),
                    str(value)[:60],
                    "must be plain JSON data (no NaN or infinity, dates, or mixed key types); "
                    "quote it as a string if vLLM expects one",
                )
            )
    return errors


def _arg_source(data: Mapping[str, Any]) -> ArgSource:
    """The vLLM tables that judge ``data``'s engine arguments: its engine's, for its pins (read
    from the raw mapping, so a mistyped field elsewhere does not hide them); none for a target
    that names no engine (an error of its own)."""
    engine_name = _engine_name(data)
    if engine_name is None:
        return ArgSource(None)
    return get_engine(engine_name).arg_source(_pins(data))


def _engine_name(data: Mapping[str, Any]) -> str | None:
    """The engine of ``data``'s target; None for a target that names none (an error of its own)."""
    target = data.get("target")
    return target_engines().get(target) if isinstance(target, str) else None


def _pins(data: Mapping[str, Any]) -> dict[str, str]:
    """``data``'s ``toolchain`` pins that are strings (read from the raw mapping; a pin of
    another type is an error of its own); empty when ``toolchain`` is no mapping."""
    pins = data.get("toolchain")
    if not isinstance(pins, Mapping):
        return {}
    return {str(k): v for k, v in pins.items() if isinstance(v, str)}


def _pin_errors(toolchain: Mapping[str, str]) -> list[RecipeError]:
    """A pin that is not one exact version (a range would let the build drift)."""
    return [
        RecipeError(
            f"toolchain.{dist}", version, "must be one exact version (e.g. 2.13.0), no range"
        )
        for dist, version in toolchain.items()
        if not EXACT_VERSION.match(version)
    ]


@dataclass(frozen=True)
class _Typed:
    """The typed fields of a recipe (None when its target names no engine, so no engine's rules
    can run), the type errors found, and the stand-in given for each key that failed."""

    fields: _Fields | None
    errors: list[RecipeError]
    stand_ins: dict[str, Any]


def _stand_in(key: str, data: Mapping[str, Any]) -> Any:
    """What :class:`_Fields` key ``key`` holds for the rules when the recipe's value failed."""
    if key == "toolchain":  # every pin kept (a mistyped one as text), so none reads as missing
        pins = data.get("toolchain")
        return {str(k): str(v) for k, v in pins.items()} if isinstance(pins, Mapping) else {}
    if key in PLACEHOLDERS:
        return PLACEHOLDERS[key]
    if key in STAND_INS:
        return STAND_INS[key]
    return _Fields.model_fields[key].default


def _typed_fields(data: Mapping[str, Any]) -> _Typed:
    """:class:`_Fields` of ``data``, a stand-in (:func:`_stand_in`) for each key that failed, so
    that the engine's rules still run on the rest and every error is reported in one pass."""
    try:
        return _Typed(_Fields.model_validate(data), [], {})
    except ValidationError as exc:
        errors = _pydantic_errors(exc, data)
        failed = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
    if "target" in failed:
        return _Typed(None, errors, {})
    stand_ins = {key: _stand_in(key, data) for key in sorted(failed)}
    try:
        return _Typed(_Fields.model_validate({**data, **stand_ins}), errors, stand_ins)
    except ValidationError:  # a stand-in that does not fit: report the type errors alone
        return _Typed(None, errors, {})


def _judged_a_stand_in(error: RecipeError, stand_ins: Mapping[str, Any]) -> bool:
    """Whether an engine rule's ``error`` judged a stand-in rather than the recipe: it names a
    key that was stood in, or (for the sizes other rules compare with, :data:`CROSS_CHECKED`)
    names one in its hint (``max_num_batched_tokens (8192) is capped at max_model_len``)."""
    root = re.split(r"[.\[]", error.field, maxsplit=1)[0]
    if root in stand_ins and (root != "toolchain" or not stand_ins[root]):
        return True  # toolchain's stand-in keeps every pin, unless it was no mapping at all
    return any(re.search(rf"\b{key}\b", error.hint) for key in CROSS_CHECKED & stand_ins.keys())


def _foreign_fields(data: Mapping[str, Any], engine: str) -> list[RecipeError]:
    """An error for each key ``data`` sets that another engine owns (a registry row's
    ``fields``): it would be ignored by ``engine``, so the recipe would not say what it builds."""
    errors = []
    for key, owner in engine_fields().items():
        if data.get(key) is not None and owner != engine:
            targets = " or ".join(ENGINES[owner].targets)
            errors.append(
                RecipeError(key, data[key], f"only applies to target {targets}; remove it")
            )
    return errors


def _engine_errors(
    recipe: Recipe, fields: _Fields, stand_ins: Mapping[str, Any]
) -> tuple[list[RecipeError], list[str]]:
    """The engine's rules (and the ``engine`` key's) over ``recipe`` with ``stand_ins`` put in
    place of the engine arguments that failed, leaving out what judged a stand-in."""
    errors = []
    if fields.engine is not None and fields.engine != recipe.engine:
        errors.append(
            RecipeError(
                "engine",
                fields.engine,
                f"target {recipe.target} is compiled by engine '{recipe.engine}'; "
                f"set engine: {recipe.engine} or drop the key",
            )
        )
    args = {**recipe.engine_args, **{k: v for k, v in stand_ins.items() if k not in OWN_KEYS}}
    judged = dataclasses.replace(
        recipe, engine_args={k: v for k, v in args.items() if v is not None}
    )
    found, warnings = engine_for(recipe).validate(judged)
    errors += [e for e in found if not _judged_a_stand_in(e, stand_ins)]
    return errors, warnings


def parse_recipe(data: Any, source: str = "<recipe>") -> Recipe:
    """Validate ``data`` (the loaded YAML) into a :class:`Recipe`.

    Every check runs in one pass: a key that fails its type is replaced by a stand-in for the
    checks after it (errors that only judge a stand-in are left out), a mistyped
    ``additional_config`` by ``{}``, and a target that names no engine leaves out only the
    engine's rules (toolchain pins, the ``serve:`` section and the engine arguments' types are
    checked still).

    Raises:
        RecipeInvalid: with every problem found, one :class:`RecipeError` each: unknown keys
            (with a did-you-mean), wrong types, contradictions, and the engine's own rules
            (for Neuron targets, the checks vLLM-Neuron applies at start).
    """
    if not isinstance(data, Mapping):
        raise RecipeInvalid(
            source, [RecipeError("<top level>", NOT_A_VALUE, "a recipe must be a YAML mapping")]
        )
    arg_source = _arg_source(data)
    errors = _check_keys(data, arg_source.tables)
    args = {k: v for k, v in data.items() if k not in own_keys()}
    config_errors = _parse_additional_config(args)
    errors += _json_errors(args) + _value_errors(args, arg_source.tables, config_errors)
    typed = _typed_fields(data)
    errors += typed.errors + config_errors + _pin_errors(_pins(data))
    engine_name = _engine_name(data)
    warnings: list[str] = []
    serving_only = SERVING_ONLY_ARGS
    recipe = None
    if typed.fields is not None and engine_name is not None:
        fields = typed.fields
        recipe = Recipe(
            name=fields.name,
            target=fields.target,
            engine=engine_name,
            toolchain=dict(fields.toolchain),
            engine_args=args,
            fields={
                k: data[k] for k, e in engine_fields().items() if k in data and e == engine_name
            },
            source=source,
        )
        stand_ins = {**typed.stand_ins, **({"additional_config": {}} if config_errors else {})}
        engine_errors, warnings = _engine_errors(recipe, fields, stand_ins)
        # One line per field: where vLLM's own table already refused a value, the engine's
        # rule on it (the check that stands in where no table fits) would say it again.
        reported = {e.field for e in errors}
        errors += [e for e in engine_errors if e.field not in reported]
        errors += _foreign_fields(data, engine_name)
        serving_only = engine_for(recipe).serving_only_args
    errors += check_serve_section(data.get("serve"), serving_only, arg_source.tables)
    credentials = _credential_errors(data, arg_source.tables)
    if credentials:  # one line per field: the credential's, not its value's
        named = {e.field for e in credentials}
        errors = credentials + [e for e in errors if e.field not in named]
    if errors or recipe is None:
        raise RecipeInvalid(source, errors)
    host = (
        *engine_for(recipe).host_warnings(recipe),
        *(() if arg_source.warning is None else (arg_source.warning,)),
    )
    serve = {str(k).replace("-", "_"): v for k, v in (data.get("serve") or {}).items()}
    return dataclasses.replace(recipe, warnings=(*warnings, *host), serve=serve, host_warnings=host)


def _load_yaml(text: str, source: str) -> Any:
    """The YAML document in ``text``, refusing duplicate keys
    (:func:`~neuronbuild.user_files.load_yaml_unique`).

    Raises:
        RecipeInvalid: a key appears twice in one mapping. yaml.YAMLError: not valid YAML.
    """
    try:
        return load_yaml_unique(text)
    except DuplicateKeys as exc:
        raise RecipeInvalid(source, exc.errors) from None


# The file's bounds: a recipe file is read within the bounds a config file keeps (size,
# nesting, node count, no anchors or aliases, integers of sane length).
#
# A recipe is config, not a program: as the store bounds each record it reads
# (:data:`neuronbuild.store.layout.MAX_RECORD_BYTES`), a recipe is read with a byte limit and its
# YAML events are checked before anything is built from them, so a hostile or mistaken file is
# refused in one line, fast: a YAML alias bomb (a few hundred bytes that expand to billions of
# nodes), a device or FIFO given as the recipe (``/dev/zero`` would be read forever), nesting deep
# enough to exhaust Python's stack (PyYAML composes recursively, and its scanner slows down
# quadratically with the depth of flow nesting), or an integer longer than Python converts
# (4,300 digits, ``sys.int_info.default_max_str_digits``).

MAX_RECIPE_BYTES = 256 << 10
"""Largest recipe file read (bytes); the checked-in recipes are about 1 KiB."""
MAX_DEPTH = 16
"""Deepest nesting of mappings and sequences (the top-level mapping is 1;
``additional_config.neuron_config`` lists are at 4)."""
MAX_NODES = 20_000
"""Most YAML nodes (scalars, mappings, sequences) one recipe may hold; bounds the time to read
it (about 0.2 s here) whatever the file holds."""
MAX_INT_DIGITS = 30
"""Longest integer literal (digits, signs and ``_`` left out); every engine argument's range is
far below it (:data:`neuronbuild.recipe.MAX_INT`), which then names the field."""

_INT_TAG = "tag:yaml.org,2002:int"


def _refuse(source: str, hint: str) -> RecipeInvalid:
    return RecipeInvalid(source, [RecipeError("<file>", NOT_A_VALUE, hint)])


def read_recipe_text(path: str | Path) -> str:
    """The recipe file's text, read with a limit.

    The file is opened without blocking and checked to be a regular file before a byte is read
    (a FIFO, a device such as ``/dev/zero`` or a directory is refused), and at most
    :data:`MAX_RECIPE_BYTES` + 1 bytes are read.

    Raises:
        RecipeInvalid: the file cannot be opened, is not a regular file, is larger than
            :data:`MAX_RECIPE_BYTES`, or is not UTF-8.
    """
    source = str(path)
    try:
        data = read_bounded(path, MAX_RECIPE_BYTES)
    except Unreadable as exc:
        hint = {
            "open": f"cannot read: {exc.detail}",
            "kind": f"is {exc.detail}, not a regular file; give the recipe's YAML file",
            "size": f"larger than {size(MAX_RECIPE_BYTES)}, the most a recipe may be; a recipe "
            "is vLLM's arguments, not data: move large content to files it names",
        }[exc.problem]
        raise _refuse(source, hint) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(source, f"not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _line(event: yaml.Event) -> int:
    mark = event.start_mark
    return 0 if mark is None else int(mark.line) + 1


def check_events(text: str, source: str) -> None:
    """Walk the YAML events of ``text`` (nothing is composed or constructed) and refuse what a
    recipe never needs, stopping at the first problem.

    Raises:
        RecipeInvalid: an anchor or alias (``&x``, ``*x``: write the value out), nesting
            deeper than :data:`MAX_DEPTH`, more than :data:`MAX_NODES` nodes, or an integer
            literal of more than :data:`MAX_INT_DIGITS` digits; each names its line.
        yaml.YAMLError: the text is not YAML (the caller reports it).
    """
    resolver = yaml.resolver.Resolver()
    depth = nodes = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _refuse(
                source,
                f"line {_line(event)}: YAML anchors and aliases (&name, *name) are not read in "
                "a recipe; write the value out where it is used",
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        nodes += isinstance(event, yaml.NodeEvent)
        for count, cap, what in (
            (depth, MAX_DEPTH, "levels deep; vLLM's arguments nest a few levels at most"),
            (nodes, MAX_NODES, "values; a recipe is vLLM's arguments, not data"),
        ):
            if count > cap:
                raise _refuse(source, f"line {_line(event)}: more than {cap} {what}")
        if isinstance(event, yaml.ScalarEvent) and event.implicit[0] and event.style is None:
            tag = resolver.resolve(  # type: ignore[no-untyped-call]
                yaml.ScalarNode, event.value, (True, False)
            )
            digits = re.sub(r"[^0-9A-Fa-f]", "", event.value.removeprefix("0x"))
            if tag == _INT_TAG and len(digits) > MAX_INT_DIGITS:
                raise _refuse(
                    source,
                    f"line {_line(event)}: an integer of {len(digits)} digits; no argument "
                    f"takes more than {MAX_INT_DIGITS}",
                )


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate the recipe at ``path``.

    Raises:
        RecipeInvalid: the file is missing, not a regular file, over the bounds of
            the file bounds below (size, nesting, nodes, anchors, integer length), is
            not YAML, holds a key twice in one mapping, or fails validation (see
            :func:`parse_recipe`).
    """
    source = str(path)
    text = read_recipe_text(path)
    try:
        check_events(text, source)
        data = _load_yaml(text, source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise RecipeInvalid(
            source, [RecipeError("<file>", NOT_A_VALUE, f"not valid YAML{where}: {problem}")]
        ) from None
    return parse_recipe(data, source)
