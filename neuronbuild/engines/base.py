"""The engine protocol: the only backend-specific code (DESIGN.md, "Engines").

An engine answers: how a recipe is checked and expands into compile units (here); how one unit is
compiled in a subprocess and which scratch-cache entries are complete (its compile half, loaded
lazily so the runtime never imports it); and which env + args make vLLM load only prebuilt
artifacts (its serve half).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from neuronbuild import start_env
from neuronbuild.data.vllm_data import engine_arg_defaults, env_vars
from neuronbuild.engines.arg_classes import KEYED_ARGS, SERVING_ONLY_ARGS, resolve_engine_args
from neuronbuild.engines.arg_sources import ArgSource, arg_tables_for
from neuronbuild.engines.env_classes import (
    AT_COMPILE_AND_SERVE,
    EnvClass,
    class_label,
    classify_vllm_env,
    is_path_valued,
)
from neuronbuild.engines.model_limits import max_model_len_error
from neuronbuild.engines.vllm_args import vllm_cli_args
from neuronbuild.errors import MISSING, RecipeError, UserError
from neuronbuild.graph import Graph
from neuronbuild.model_files import (
    hub_id_problem,
    is_pinned_revision,
    local_folder,
    looks_like_path,
    read_config,
)

if TYPE_CHECKING:
    from neuronbuild.engines.compiler import UnitCompiler
    from neuronbuild.engines.coverage import Needed
    from neuronbuild.recipe import Recipe
    from neuronbuild.store.records import UnitRecord


@dataclass(frozen=True)
class UnitEstimate:
    """What compiling one unit is expected to take: wall ``seconds``, ``cpus`` (cores kept busy)
    and ``memory_gib`` (peak host memory, GiB). Used to balance shards (largest first) and as
    the per-task resources of the Ray executor."""

    seconds: float
    cpus: float
    memory_gib: float


@dataclass(frozen=True)
class UnitSpec:
    """One compile unit as an engine sees it: its graphs and its engine-specific key factors."""

    graphs: tuple[Graph, ...]
    factors: dict[str, Any] = field(default_factory=dict)


class Engine(ABC):
    """One compile backend (``cpu`` or ``neuron``).

    Subclasses set :attr:`name`, :attr:`required_toolchain` (distributions a recipe must pin),
    :attr:`note` (a line the text plan prints) and their classification of what they read:
    :attr:`env_classes` (variable -> :class:`EnvClass`, over vLLM's own classes) and
    :attr:`env_prefix_classes` (name prefix -> class; a path-valued match is node-local),
    :attr:`key_env` (more keyed names), :attr:`serving_only_args` / :attr:`keyed_args` (every
    engine argument of the pinned vLLM is in exactly one) and :attr:`own_arg_defaults` (the
    engine's defaults where they differ from vLLM's dataclass defaults); and the estimate of one
    unit (:meth:`estimate`): :attr:`graph_seconds` per graph it compiles, :attr:`unit_cpus` and
    :attr:`unit_memory_gib`.
    """

    name: ClassVar[str]
    env_classes: ClassVar[Mapping[str, EnvClass]] = {}
    env_prefix_classes: ClassVar[tuple[tuple[str, EnvClass], ...]] = ()
    prefix_path_class: ClassVar[EnvClass] = EnvClass.NODE_LOCAL
    """The class of a path-valued name that only a prefix of :attr:`env_prefix_classes` matches
    (a path never enters a key)."""
    key_env: ClassVar[tuple[str, ...]] = ()
    serving_only_args: ClassVar[frozenset[str]] = SERVING_ONLY_ARGS
    keyed_args: ClassVar[frozenset[str]] = KEYED_ARGS
    own_arg_defaults: ClassVar[Mapping[str, Any]] = {}
    required_toolchain: ClassVar[tuple[str, ...]] = ()
    vllm_distribution: ClassVar[str] = "vllm"
    """The distribution of vLLM this engine runs, as the recipe's ``toolchain`` pins it: the
    argument tables its recipes are checked with follow that pin
    (:func:`~neuronbuild.engines.arg_sources.arg_tables_for`)."""
    observed_toolchain: ClassVar[tuple[str, ...]] = ()
    """Distributions the platform's own key reads when they are installed, pinned or not: their
    presence here enters the ``installed`` factor (and serve compares it)."""
    system_components: ClassVar[tuple[str, ...]] = ()
    """System packages (not Python distributions) a node needs at the versions the build's
    release ships or newer, compared in :meth:`node_differences` (the Neuron runtime and
    driver); what ``--allow-mismatch`` also takes."""
    written_last: ClassVar[tuple[str, ...]] = ()
    """File names that mark a cache entry complete: laid out after every other file at serve."""
    content_files: ClassVar[tuple[str, ...]] = ()
    """Patterns (:func:`fnmatch.fnmatchcase`, over a path relative to ``VLLM_CACHE_ROOT``) of
    the files that hold an entry's compiled content: one of them empty makes its entry
    incomplete, whatever markers it has (:meth:`hollow`)."""
    compile_cache: ClassVar[str | None] = None
    """The folder under ``VLLM_CACHE_ROOT`` a compile writes into (a serve that compiled leaves
    files there that its manifest does not list: ``neuronbuild probe``); None where unknown."""
    load_bookkeeping: ClassVar[tuple[str, ...]] = ()
    """Names of the files the engine writes into a compile cache entry it loads without
    compiling (vLLM-Neuron's ``.cache_accessed``): not a compile, to ``neuronbuild probe``."""
    note: ClassVar[str] = ""
    conformance_kit: ClassVar[str | None] = None
    """Where this engine's conformance kit lives (``module:function``, imported by
    ``neuronbuild conformance`` only; called as ``(recipe, cache URL, host, timeout seconds)``
    and returning the manifest digest and its checks), or None: the engine offers none."""
    factor_meanings: ClassVar[Mapping[str, str]] = {}
    """Why each unit factor this engine adds (:attr:`UnitSpec.factors`) makes a miss, as
    ``doctor`` explains it (the shared ones: ``keys.FACTOR_MEANINGS``)."""
    graph_seconds: ClassVar[float] = 60.0
    unit_cpus: ClassVar[float] = 1.0
    unit_memory_gib: ClassVar[float] = 4.0

    def validate(self, recipe: Recipe) -> tuple[list[RecipeError], list[str]]:
        """Every error and warning of ``recipe`` for this engine (errors name field, value, fix)."""
        errors, warnings = [], []
        missing = [d for d in self.required_toolchain if d not in recipe.toolchain]
        if missing:
            example = ", ".join(f"{d}: <version>" for d in self.required_toolchain)
            errors.append(
                RecipeError(
                    "toolchain",
                    recipe.toolchain or MISSING,
                    f"must pin {', '.join(missing)} to exact versions, e.g. {{{example}}}",
                )
            )
        revision = recipe.engine_args.get("revision")
        is_hub = local_folder(recipe.model, recipe.workdir) is None and not looks_like_path(
            recipe.model
        )
        problem = hub_id_problem(recipe.model) if is_hub else None
        if problem:
            errors.append(
                RecipeError(
                    "model",
                    recipe.model,
                    f"is neither a local folder nor a valid Hugging Face hub id ({problem}); "
                    "set it to an existing folder or an id like org/name",
                )
            )
        # A non-string revision is already a recipe error (recipe._Fields, StrictStr); the
        # pinning advice is for a well-typed one only.
        if (
            is_hub
            and not problem
            and (revision is None or isinstance(revision, str))
            and not (is_pinned_revision(revision))
        ):
            warnings.append(
                f"revision={revision or '(absent)'}: hub model {recipe.model} needs a commit "
                "hash for a fleet build (a branch moves while the key stays); set revision: "
                "<40-hex commit>"
            )
        length = recipe.engine_args.get("max_model_len")
        args = recipe.engine_args
        # hf_overrides and hf_config_path change the config vLLM checks against: not judged.
        if (
            isinstance(length, int)
            and not isinstance(length, bool)
            and not (args.get("hf_overrides") or args.get("hf_config_path"))
        ):
            config = read_config(args, recipe.workdir)
            too_long = max_model_len_error(length, config, start_env.environ())
            errors += [] if too_long is None else [too_long]
        return errors, warnings

    def host_warnings(self, recipe: Recipe) -> list[str]:
        """Warnings about what this host lacks to check ``recipe`` (a valid one) fully, rather
        than about the recipe: ``validate --strict`` leaves them warnings. None by default."""
        return []

    def arg_source(self, toolchain: Mapping[str, str]) -> ArgSource:
        """The vLLM argument tables (types, choices, defaults) that judge a recipe with these
        ``toolchain`` pins (:func:`~neuronbuild.engines.arg_sources.arg_tables_for`)."""
        pin = toolchain.get(self.vllm_distribution)
        where = "" if pin is None else self.vllm_origin(pin)
        return arg_tables_for(self.vllm_distribution, pin, where)

    def vllm_origin(self, pin: str) -> str:
        """Where the vLLM this engine runs comes from at version ``pin``, and so where its
        argument table can be read (the end of the warning when this host has none); empty:
        ``pip install`` it here."""
        return ""

    @abstractmethod
    def units(self, recipe: Recipe) -> list[UnitSpec]:
        """The compile units of a valid ``recipe``, in compile order."""

    def toolchain_fix(self, toolchain: Mapping[str, str]) -> str:
        """What to do on a host whose installed versions differ from the ``toolchain`` pins (the
        end of compile's and serve's refusal): by default neuronbuild's own install route."""
        return "install the pinned versions (make install)"

    def compiler(self) -> UnitCompiler:
        """This engine's compile half (imported only when compiling).

        Raises:
            UserError: the engine's toolchain cannot be used on this machine.
        """
        raise UserError(f"engine {self.name} cannot compile on this machine")

    def classify_env(self, name: str) -> EnvClass | None:
        """The class of environment variable ``name`` for this engine; None when neither the
        engine nor vLLM reads it (it then passes through untouched)."""
        if name in self.env_classes:
            return self.env_classes[name]
        if name in self.key_env:
            return EnvClass.KEYED
        for prefix, env_class in self.env_prefix_classes:
            if name.startswith(prefix):
                return self.prefix_path_class if is_path_valued(name) else env_class
        return classify_vllm_env(name)

    def env_classification(self) -> dict[EnvClass, list[str]]:
        """The variables this engine classifies itself, by class (``--help``'s environment
        section): its :attr:`env_classes` and :attr:`key_env`, each vLLM variable it classifies
        otherwise than vLLM's own rule, and each prefix of :attr:`env_prefix_classes` as
        ``PREFIX*`` (and ``PREFIX* holding a path`` under :attr:`prefix_path_class` where that
        differs); names sorted. Every other variable vLLM reads follows
        :func:`~.env_classes.vllm_env_classification`."""
        names = set(self.env_classes) | set(self.key_env)
        names |= {n for n in env_vars() if self.classify_env(n) != classify_vllm_env(n)}
        out: dict[EnvClass, list[str]] = {c: [] for c in EnvClass}
        for name in sorted(names):
            env_class = self.classify_env(name)
            if env_class is not None:
                out[env_class].append(name)
        for prefix, env_class in self.env_prefix_classes:
            out[env_class].append(f"{prefix}*")
            if self.prefix_path_class is not env_class:
                out[self.prefix_path_class].append(f"{prefix}* holding a path")
        return out

    def is_key_env(self, name: str) -> bool:
        """Whether environment variable ``name`` belongs in unit keys."""
        return self.classify_env(name) is EnvClass.KEYED

    def normalise_env(
        self, name: str, value: str, target: str | None, toolchain: Mapping[str, str]
    ) -> str | None:
        """The keyed ``value`` of ``name`` in the one spelling the platform treats alike, None
        where it equals the platform's default for ``target`` and the release ``toolchain`` pins
        (as if unset); by default as set."""
        return value

    def key_env_values(
        self,
        environ: Mapping[str, str],
        target: str | None = None,
        toolchain: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """The keyed variables set in ``environ``, for a unit key's ``env`` factor, each
        normalised for ``target`` and the ``toolchain`` pins (:meth:`normalise_env`). Pass the
        environment the user started the command with (:func:`neuronbuild.start_env.environ`),
        never one the process changed itself."""
        pins = toolchain or {}
        values = {k: self.normalise_env(k, environ[k], target, pins) for k in sorted(environ)}
        return {k: v for k, v in values.items() if v is not None and self.is_key_env(k)}

    def removed_env(self, environ: Mapping[str, str]) -> list[str]:
        """Variables of ``environ`` kept from the engine process (dropped, or refused at serve
        and replaced at compile): the caller warns about each by name."""
        removed = (EnvClass.DROPPED, EnvClass.REFUSED_AT_SERVE)
        return sorted(k for k in environ if self.classify_env(k) in removed)

    def env_warnings(
        self,
        environ: Mapping[str, str],
        built: Mapping[str, str] | None = None,
        target: str | None = None,
        toolchain: Mapping[str, str] | None = None,
    ) -> list[str]:
        """One warning per variable of the user's ``environ`` that the engine process will not
        get as set, for compile and serve alike, naming its class and what happens to it
        (:data:`~.env_classes.AT_COMPILE_AND_SERVE`). ``built``: at serve, the keyed values the
        build was compiled with (a keyed variable is then replaced by the build's value, or
        unset, unless the platform reads both alike for ``target`` and the ``toolchain`` pins:
        :meth:`normalise_env`); None at compile, where the user's keyed values enter the unit
        key."""
        out = []
        pins = toolchain or {}
        for name in sorted(environ):
            env_class = self.classify_env(name)
            if env_class in (EnvClass.DROPPED, EnvClass.REFUSED_AT_SERVE):
                what = f"{class_label(env_class)}: {AT_COMPILE_AND_SERVE[env_class]}"
                out.append(f"{name} is not passed to the engine ({what})")
            elif (
                env_class is EnvClass.KEYED
                and built is not None
                and built.get(name) != self.normalise_env(name, environ[name], target, pins)
                and built.get(name) != environ[name]
            ):
                value = "unset" if name not in built else repr(str(built[name]))
                out.append(
                    f"{name} is replaced by the build's value ({value}); it is keyed: "
                    f"{AT_COMPILE_AND_SERVE[env_class]} (compile with this value to serve it)"
                )
        return out

    def refused_at_serve(self, environ: Mapping[str, str]) -> list[str]:
        """Variables of ``environ`` that would make a serving node compile or mis-target."""
        return sorted(k for k in environ if self.classify_env(k) is EnvClass.REFUSED_AT_SERVE)

    def engine_env(self, environ: Mapping[str, str], keyed: Mapping[str, str]) -> dict[str, str]:
        """The environment of an engine process, at compile and at serve alike: ``environ``
        without keyed, dropped or refused variables, plus exactly the unit's ``keyed`` values."""
        env = {
            k: v for k, v in environ.items() if self.classify_env(k) in (None, EnvClass.NODE_LOCAL)
        }
        env.update({k: str(v) for k, v in keyed.items() if self.is_key_env(k)})
        return env

    @abstractmethod
    def serve_env(self, cache_root: str, toolchain: Mapping[str, str]) -> dict[str, str]:
        """Variables that make vLLM (the release ``toolchain`` pins) load only the prebuilt
        artifacts under ``cache_root`` (the ``VLLM_CACHE_ROOT``) and fail at start, never
        compile, when one is missing."""

    def start_args(self, recipe: Recipe) -> dict[str, Any]:
        """The engine arguments vLLM is started with at compile and at serve: the recipe's, plus
        any value the plan resolved that vLLM would resolve otherwise when it is left out (its
        offline ``LLM`` and its API server default some differently). The recipe's by default."""
        return dict(recipe.engine_args)

    def start_argv(self, recipe: Recipe) -> list[str]:
        """:meth:`start_args` as vLLM's API server takes them
        (:func:`~neuronbuild.engines.vllm_args.vllm_cli_args`): the one argv compile and serve
        both start vLLM with (serve adds the recipe's ``serve:`` section after it)."""
        return vllm_cli_args(self.start_args(recipe))

    def hollow(self, files: Iterable[tuple[str, int]]) -> list[str]:
        """The paths of ``files`` (``(path, size in bytes)``) that must hold an entry's compiled
        content (:attr:`content_files`) and are empty: vLLM can leave its AOT artifact at 0 bytes
        when its save fails after compiling (vllm-project/vllm#35061), beside a complete-looking
        entry. Compile refuses to publish such a unit, reuses no record holding one (it is
        compiled again and its record replaced), and serve and verify name it."""
        return [
            path
            for path, size in files
            if size == 0 and any(fnmatchcase(path, p) for p in self.content_files)
        ]

    def sound(self, record: UnitRecord) -> bool:
        """Whether unit record ``record`` holds no :meth:`hollow` file (what compile may reuse)."""
        return not self.hollow((f.path, f.size) for f in record.files)

    def addition_kind(self, toolchain: Mapping[str, str]) -> str | None:
        """The kind of addition (:mod:`neuronbuild.attest.additions`) a node of the release
        ``toolchain`` pins writes at its first start and a compile host cannot, which
        ``capture`` gives back to the build; None (the default) when a start writes nothing
        the build lacks."""
        return None

    def coverage_gaps(self, needed: Needed, held: Sequence[UnitRecord]) -> list[str]:
        """One line per graph of ``needed`` (per unit: phase, graphs) that the unit records
        ``held`` do not cover (:func:`~.coverage.check_coverage`). By default a graph is covered
        when a held record lists it and has files: a unit of such an engine is one engine
        configuration whose entries serve all its graphs (the CPU engine's one dynamic graph)."""
        have = {g.identity for u in held if u.files and self.sound(u) for g in u.graphs}
        empty = {
            g.identity: self.hollow((f.path, f.size) for f in u.files)[0]
            for u in held
            if not self.sound(u)
            for g in u.graphs
        }
        return [
            f"graph {g.label()}: {empty[g.identity]} is empty (the compile's save failed)"
            if g.identity in empty
            else f"graph {g.label()} missing"
            for _, graphs in needed
            for g in graphs
            if g.identity not in have
        ]

    def lay_out_beside(self, cache_root: Path, paths: Sequence[str]) -> None:
        """After a manifest's ``paths`` were laid out and verified under ``cache_root``: lay out
        the files the engine reads outside ``VLLM_CACHE_ROOT`` (vLLM-Neuron's NKI kernel
        binaries); none by default.

        Raises:
            StoreDataInvalid: a path escapes the folder it is laid out in.
        """

    @abstractmethod
    def image_architecture(self, factors: Mapping[str, Any]) -> str:
        """The OCI ``architecture`` (image-spec ``config.md``, Go's GOARCH names: ``amd64``,
        ``arm64``) of a node that runs a unit built with these unit ``factors``: what a node
        image (``neuronbuild image``) declares.

        Raises:
            ValueError: the factors name no machine this engine knows (store data, not a
                recipe: the caller reports it as such).
        """

    def release_of(self, toolchain: Mapping[str, str]) -> str | None:
        """The name of the SDK release ``toolchain`` (a recipe's pins) installs, as people call
        it (``Neuron 2.34.0``), or None where the engine has no such name; what an index's
        entries are shown as (``serve``, ``ls``)."""
        del toolchain
        return None

    def node_differences(self, factors: dict[str, Any]) -> list[tuple[str, str, str]]:
        """``(name, built for, this node)`` for each way this node cannot run artifacts built
        with these unit factors (its target, its instruction set); empty when it can."""
        return []

    def arg_defaults(self) -> dict[str, Any]:
        """Each engine argument's value when a recipe leaves it out: the pinned vLLM's
        dataclass defaults overlaid with :attr:`own_arg_defaults`."""
        return {**engine_arg_defaults(), **self.own_arg_defaults}

    def key_engine_args(self, recipe: Recipe) -> dict[str, Any]:
        """The resolved keyed engine arguments of ``recipe``, as their difference from
        :meth:`arg_defaults` (see :func:`~.arg_classes.resolve_engine_args`): serving-only
        arguments, ``model`` and ``revision`` (keyed on their own) left out."""
        return resolve_engine_args(recipe.engine_args, self.arg_defaults(), self.serving_only_args)

    def estimate(self, graphs: int) -> UnitEstimate:
        """The expected cost of a unit that compiles ``graphs`` graphs: seconds grow with the
        graphs (compiled one after another in one engine process), cores and memory do not."""
        return UnitEstimate(
            self.graph_seconds * max(1, graphs), self.unit_cpus, self.unit_memory_gib
        )
