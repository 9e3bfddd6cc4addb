"""Each example break of issues 8 and 19, applied to the product by hand, must fail the tests
named with it: ``python -m tests.claim_breaks [NAME...]`` first runs those tests on the unbroken
product (a kill means nothing if they already fail), then applies one break at a time, runs its
tests, restores the file, and exits 1 if any break survives (2 if the tests fail unbroken).
(``make mutation`` is the systematic version; these are the breaks the README's claims are known
to hinge on.)"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Break:
    name: str
    edits: tuple[tuple[str, str, str], ...]  # (file, old text, new text): every occurrence
    tests: tuple[str, ...]


FOLDER_PUT = """    def put(self, path: str, data: bytes) -> None:
        with self._errors(f"cannot write {path}"), self._temp(data) as tmp:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.replace(tmp, path)
            _fsync_dir(path)
"""
FOLDER_PUT_DIRECT = """    def put(self, path: str, data: bytes) -> None:
        with self._errors(f"cannot write {path}"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(path)
"""
FOLDER_CREATE = """            try:
                os.link(tmp, path)
            except FileExistsError:
                # On NFS a LINK sent again after its reply was lost answers EEXIST although the
                # first made the link; the temporary file's link count tells (open(2), O_EXCL).
                if os.stat(tmp).st_nlink < 2:
                    return False
"""
FOLDER_CREATE_DIRECT = """            try:
                with open(path, "xb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except FileExistsError:
                return False
"""
FOLDER_PUT_FILE = """            with open(local, "rb") as src, open(tmp, "xb") as out:"""
FOLDER_PUT_FILE_DIRECT = """            with open(local, "rb") as src, open(path, "wb") as out:"""
FOLDER_PUT_FILE_RENAME = """            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.replace(tmp, path)
            _fsync_dir(path)

    def move_in"""
FOLDER_PUT_FILE_NO_RENAME = """            _fsync_dir(path)

    def move_in"""

BACKENDS = "neuronbuild/transports/backends.py"
CLAIMS_STORE = "tests/store/test_claims_store.py"
FOLDER = "tests/store/test_conformance.py::TestFolderStore"
S3 = "tests/store/test_conformance.py::TestS3Store"
SEAWEED = "tests/store/test_conformance.py::TestSeaweedStore"
VERSIONS = "tests/engines/test_versions.py"
NEURON_ENV = "tests/engines/test_neuron_env_classes.py"
KEY_FACTORS = "tests/test_claims_key_factors.py"
BUCKETS = "neuronbuild/engines/neuron/buckets.py"
BUCKET_CLAIMS = "tests/engines/test_claims_buckets.py"
RETRIES = "tests/orchestrate/test_claims_retries.py"
NODE_CHECKS = "runtime/node_checks.py"
NODE_CLAIMS = "tests/runtime/test_claims_node_checks.py"
PINS_BUCKETS = "tests/engines/test_pins_buckets.py"
PINS_ENTRIES = "tests/engines/test_pins_neuron_entries.py"
NEURON_COMPILE = "neuronbuild/engines/neuron/compile.py"
NEURON_COVERAGE = "neuronbuild/engines/neuron/coverage.py"
ENTRY_COMPLETE = "test_an_entry_is_complete_only_with_its_marker_and_metadata_naming_its_own_key"
HARVEST_KEEPS = "test_harvest_keeps_an_entrys_artifacts_and_leaves_scratch_behind"
HARVEST_COMPLETE = "test_harvest_takes_only_complete_entries_and_refuses_a_run_that_left_none"
SETTLE_DROPS = (
    "test_settling_drops_the_seeded_entries_the_run_did_not_hit_and_keeps_the_nki_folders"
)
SETTLE_REFUSES = "test_settling_refuses_fewer_complete_entries_than_the_units_graphs"
OOM_KILL = "test_a_sigkill_seen_as_137_or_minus_9_is_an_oom_kill_retried_with_fewer_workers"
COVERAGE_COUNTS = "test_coverage_counts_an_entry_only_with_its_marker_and_metadata"
GC = "neuronbuild/store/gc.py"
NODE = "neuronbuild/node/materialize.py"
TIERED = "neuronbuild/store/tiered.py"
CAS = "neuronbuild/store/cas.py"
INDEX = "tests/store/test_index.py"
CLAIMS_GC = "tests/store/test_claims_gc.py"
CLAIMS_NODE = "tests/store/test_claims_node.py"
CLAIMS_TIERED = "tests/store/test_claims_tiered.py"
CLAIMS_CAS = "tests/store/test_claims_cas.py"
CLAIMS_BACKENDS = "tests/store/test_claims_backends.py"
CLAIMS_TRANSFER = "tests/store/test_claims_transfer.py"

BREAKS = [
    Break(
        "folder compare-and-swap without the compare",
        (
            (
                BACKENDS,
                """            if current != token:
                raise SwapConflict(f"{path} changed while moving it")
            self.put(path, data)""",
                "            self.put(path, data)",
            ),
        ),
        (
            f"{FOLDER}::test_a_swap_with_a_stale_version_is_refused_and_changes_nothing",
            f"{FOLDER}::test_a_mover_overtaken_between_read_and_swap_loses_and_history_stays_one_chain",
        ),
    ),
    Break(
        "folder writes straight to the final path (no temporary file and rename)",
        (
            (BACKENDS, FOLDER_PUT, FOLDER_PUT_DIRECT),
            (BACKENDS, FOLDER_CREATE, FOLDER_CREATE_DIRECT),
            (BACKENDS, FOLDER_PUT_FILE, FOLDER_PUT_FILE_DIRECT),
            (BACKENDS, FOLDER_PUT_FILE_RENAME, FOLDER_PUT_FILE_NO_RENAME),
        ),
        (
            f"{CLAIMS_STORE}::test_a_folder_write_that_dies_half_way_leaves_the_old_object_or_nothing",
            "tests/store/test_claims_crash.py::test_a_folder_publisher_killed_at_every_step_leaves_a_consistent_store",
        ),
    ),
    Break(
        "every fsync removed",
        ((BACKENDS, "os.fsync(", "(lambda fd: None)("),),
        (
            f"{CLAIMS_STORE}::test_every_published_object_is_synced_before_it_is_named_and_its_folder_after",
        ),
    ),
    Break(
        "the blob-presence check above 64 blobs answers 'all present'",
        (
            (
                "neuronbuild/store/cas.py",
                "return [e for e in unique if sizes.get(self.layout.blob(e.digest)) != e.size]",
                "return []",
            ),
        ),
        (
            f"{FOLDER}::test_the_presence_check_finds_every_missing_or_short_blob_at_any_count[65]",
            f"{S3}::test_the_presence_check_finds_every_missing_or_short_blob_at_any_count[192]",
        ),
    ),
    Break(
        "unit records published before their blobs",
        (
            (
                "neuronbuild/orchestrate/compile.py",
                "zip(files, paths, store.put_files(paths), strict=True)",
                "zip(files, paths, [hash_file(p) for p in paths], strict=True)",
            ),
            (
                "neuronbuild/orchestrate/compile.py",
                "    return store.put_unit(record, engine.sound if engine is not None else None)\n",
                "    stored = store.put_unit(record, engine.sound if engine is not None else None)\n"
                "    store.put_files(paths)\n    return stored\n",
            ),
            (
                "neuronbuild/orchestrate/compile.py",
                "from neuronbuild.store.cas import LATEST, Store\n",
                "from neuronbuild.store.cas import LATEST, Store\n"
                "from neuronbuild.digest import hash_file\n",
            ),
            (
                "neuronbuild/store/cas.py",
                '        if missing:\n            raise StoreError(f"{self.url}: unit',
                '        if False:\n            raise StoreError(f"{self.url}: unit',
            ),
        ),
        (
            f"{FOLDER}::test_publish_order_blobs_then_unit_records_then_manifest_then_ref",
            "tests/store/test_claims_crash.py::test_a_folder_publisher_killed_at_every_step_leaves_a_consistent_store",
        ),
    ),
    Break(
        "the S3 ref written unconditionally",
        (
            (
                BACKENDS,
                'condition = {"mode": "create"} if token is None else {"IfMatch": token}',
                "condition: dict[str, Any] = {}",
            ),
        ),
        (
            f"{S3}::test_a_swap_with_a_stale_version_is_refused_and_changes_nothing",
            f"{S3}::test_a_mover_overtaken_between_read_and_swap_loses_and_history_stays_one_chain",
            # The same on a real S3-compatible server: SeaweedFS answers If-Match itself.
            f"{SEAWEED}::test_a_swap_with_a_stale_version_is_refused_and_changes_nothing",
            f"{SEAWEED}::test_a_mover_overtaken_between_read_and_swap_loses_and_history_stays_one_chain",
        ),
    ),
    Break(
        "the S3 create without If-None-Match",
        (
            (
                BACKENDS,
                'return self._put_if(path, data, mode="create")',
                "return self._put_if(path, data)",
            ),
        ),
        (
            f"{S3}::test_the_first_unit_record_for_a_key_wins_and_a_later_builder_adopts_it",
            f"{SEAWEED}::test_the_first_unit_record_for_a_key_wins_and_a_later_builder_adopts_it",
        ),
    ),
    Break(
        "every path, size and digest check of manifests removed",
        (
            (
                "neuronbuild/store/records.py",
                '    if not isinstance(value, str) or not value:\n        raise StoreDataInvalid(f"{what}: unsafe path',
                '    return value  # type: ignore[no-any-return]\n    if not isinstance(value, str) or not value:\n        raise StoreDataInvalid(f"{what}: unsafe path',
            ),
            (
                "neuronbuild/store/records.py",
                "    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:",
                "    if False:",
            ),
            (
                "neuronbuild/store/records.py",
                'digest=check_digest(data["digest"], what),',
                'digest=data["digest"],',
            ),
            (
                "neuronbuild/store/records.py",
                "    paths: dict[str, str] = {}\n    sizes: dict[str, int] = {}\n",
                "    return\n    paths: dict[str, str] = {}\n    sizes: dict[str, int] = {}\n",
            ),
        ),
        ("tests/store/test_claims_manifests.py",),
    ),
    Break(
        "serve without VLLM_FORCE_AOT_LOAD",
        (
            (
                "neuronbuild/engines/vllm_cpu/engine.py",
                '            envs.VLLM_FORCE_AOT_LOAD: "1",\n',
                "",
            ),
        ),
        (
            "tests/runtime/test_claims_serve.py::test_serve_execs_vllm_with_exactly_the_never_compile_environment[cpu]",
        ),
    ),
    Break(
        "serve without the manifest's keyed environment",
        (
            (
                "runtime/serve.py",
                "env = engine.engine_env(view.environ, keyed)",
                "env = engine.engine_env(view.environ, {})",
            ),
        ),
        ("tests/runtime/test_claims_serve.py",),
    ),
    Break(
        "neuron serve without VLLM_NEURON_DISABLE_WARMUP_COMPILE",
        (
            (
                "neuronbuild/engines/neuron/engine.py",
                '            envs.VLLM_NEURON_DISABLE_WARMUP_COMPILE: "1",\n',
                "",
            ),
        ),
        (
            "tests/runtime/test_claims_serve.py::test_serve_execs_vllm_with_exactly_the_never_compile_environment[neuron]",
        ),
    ),
    Break(
        "a host path in a cpu unit key",
        (
            (
                "neuronbuild/engines/vllm_cpu/engine.py",
                '"warmed": warmed}',
                '"warmed": warmed, "where": str(recipe.workdir)}',
            ),
        ),
        ("tests/test_claims_keys.py",),
    ),
    Break(
        "an import of compile-side code from a module not on a deny-list",
        (
            (
                "runtime/serve.py",
                "from neuronbuild.engines.vllm_args import API_SERVER, vllm_cli_args\n",
                "from neuronbuild.engines.vllm_args import API_SERVER, vllm_cli_args\nimport neuronbuild.orchestrate.doctor  # noqa\n",
            ),
        ),
        ("tests/runtime/test_import_allowlist.py",),
    ),
    # Issue 18 items 1 and 7: versions as installed, every plugin variable classified.
    Break(
        "pins compared with installed versions as strings (SDK 2.32's labels refused)",
        (
            (
                "neuronbuild/engines/versions.py",
                "    if want.local is None:\n        return Version(want.public) == Version(have.public)",
                "    if want.local is None:\n        return want == have",
            ),
        ),
        (f"{VERSIONS}::test_compile_accepts_base_and_labelled_pins_against_labelled_builds",),
    ),
    Break(
        "the installed build keyed without its RECORD digest",
        (
            (
                "neuronbuild/engines/versions.py",
                'return version if digest is None else f"{version} {digest}"',
                "return version",
            ),
        ),
        (f"{VERSIONS}::test_the_installed_build_is_keyed_so_a_patched_plugin_gets_another_key",),
    ),
    Break(
        "a patched plugin's run seeded with its predecessor's entries",
        (
            (
                "neuronbuild/orchestrate/seeds.py",
                '"toolchain", "installed", "phase"',
                '"toolchain", "phase"',
            ),
        ),
        (
            f"{VERSIONS}::test_a_patched_plugin_recompiles_every_graph_instead_of_reusing_the_old_entries",
        ),
    ),
    Break(
        "unknown VLLM_NEURON_* names passed through unkeyed",
        (
            (
                "neuronbuild/engines/neuron/engine.py",
                "    env_prefix_classes: ClassVar[tuple[tuple[str, EnvClass], ...]] = NEURON_ENV_PREFIXES\n",
                "",
            ),
            (
                "neuronbuild/engines/neuron/env.py",
                '    "VLLM_NEURON_DISABLE_INPUT_DEDUP": KEYED,\n',
                "",
            ),
        ),
        (f"{NEURON_ENV}::test_a_graph_changing_switch_set_at_compile_is_what_serve_runs_with",),
    ),
    Break(
        "NEURON_LIBTORCH_ASSERT_CACHE_HIT reaches the compile run",
        (
            (
                "neuronbuild/engines/neuron/compile.py",
                "    envs.NEURON_LIBTORCH_ASSERT_CACHE_HIT,\n)",
                ")",
            ),
        ),
        (f"{NEURON_ENV}::test_compile_pins_the_cache_roots_and_strips_assert_cache_hit",),
    ),
    # Issue 19: one-line regressions of key factors, bucket rules, retries and serve's refusals.
    Break(
        "the revision dropped from every unit key",
        (("neuronbuild/plan.py", '        "revision": recipe.engine_args.get("revision"),\n', ""),),
        (f"{KEY_FACTORS}::test_changing_one_recipe_factor_changes_every_key_by_that_factor",),
    ),
    Break(
        "the installed builds dropped from every unit key",
        (
            (
                "neuronbuild/plan.py",
                '        "installed": installed_builds({*recipe.toolchain, *engine.observed_toolchain}),\n',
                "",
            ),
        ),
        (
            f"{KEY_FACTORS}::test_another_installed_build_of_a_pinned_distribution_changes_every_key",
        ),
    ),
    Break(
        "toolchain pins keyed by name only, not version",
        (
            (
                "neuronbuild/plan.py",
                '"toolchain": dict(recipe.toolchain),',
                '"toolchain": sorted(recipe.toolchain),',
            ),
        ),
        (f"{KEY_FACTORS}::test_changing_one_recipe_factor_changes_every_key_by_that_factor",),
    ),
    Break(
        "a key's differences name only factors both sides have",
        (
            (
                "neuronbuild/keys.py",
                "names = sorted(set(self.factors) | set(other))",
                "names = sorted(set(self.factors) & set(other))",
            ),
        ),
        (f"{KEY_FACTORS}::test_a_key_differs_from_one_without_any_of_its_factors",),
    ),
    Break(
        "single-shot prefill allowed one token past 16384 (off by one)",
        (
            (
                BUCKETS,
                "if max_model_len > MAX_MODEL_LEN_SINGLE_SHOT:",
                "if max_model_len > MAX_MODEL_LEN_SINGLE_SHOT + 1:",
            ),
        ),
        (f"{BUCKET_CLAIMS}::test_single_shot_prefill_stops_at_16384_tokens",),
    ),
    Break(
        "default bucket lists end with the maximum twice",
        ((BUCKETS, "    while value < maximum:", "    while value <= maximum:"),),
        (
            f"{BUCKET_CLAIMS}::test_default_buckets_double_from_the_start_and_end_at_the_maximum_once",
        ),
    ),
    Break(
        "a decode context bucket equal to max_model_len accepted",
        ((BUCKETS, "if length >= max_model_len:", "if length > max_model_len:"),),
        (f"{BUCKET_CLAIMS}::test_decode_context_buckets_are_multiples_of_128_below_max_model_len",),
    ),
    Break(
        "a num_seqs list ending below max_num_seqs accepted",
        (
            (
                BUCKETS,
                "if num_seqs and num_seqs[-1] != max_num_seqs:",
                "if num_seqs and num_seqs[-1] > max_num_seqs:",
            ),
        ),
        (f"{BUCKET_CLAIMS}::test_the_last_decode_bucket_must_equal_max_num_seqs",),
    ),
    Break(
        "a bucket list with a repeated bucket accepted",
        (
            (
                BUCKETS,
                "if any(a >= b for a, b in itertools.pairwise(value)):",
                "if any(a > b for a, b in itertools.pairwise(value)):",
            ),
        ),
        (f"{BUCKET_CLAIMS}::test_a_bucket_list_must_be_positive_integers_strictly_ascending",),
    ),
    Break(
        "max_num_batched_tokens not capped at max_model_len",
        ((BUCKETS, "    mnbt = min(int(mnbt), max_model_len)\n", "    mnbt = int(mnbt)\n"),),
        (f"{BUCKET_CLAIMS}::test_max_num_batched_tokens_above_max_model_len_is_capped_to_it",),
    ),
    Break(
        "prefix caching set to true with single-shot prefill accepted",
        (
            (
                BUCKETS,
                'args.get("enable_prefix_caching") is not False',
                'args.get("enable_prefix_caching") is None',
            ),
        ),
        (f"{BUCKET_CLAIMS}::test_prefix_caching_on_or_by_default_needs_segmented_prefill",),
    ),
    Break(
        "a transient engine failure retried twice",
        (("neuronbuild/orchestrate/compile.py", "backoffs < 1:", "backoffs < 2:"),),
        (f"{RETRIES}::test_a_transient_failure_is_run_again_once",),
    ),
    Break(
        "a run killed for memory retried with the transient back-off (the wrong failure)",
        (
            (
                "neuronbuild/orchestrate/compile.py",
                'if failure.retry == "backoff" and backoffs < 1:',
                'if failure.retry != "none" and backoffs < 1:',
            ),
        ),
        (f"{RETRIES}::test_a_run_killed_for_memory_is_run_twice_more_each_with_less_parallelism",),
    ),
    Break(
        "a run killed for memory retried once too often",
        (
            (
                "neuronbuild/orchestrate/compile.py",
                "pressure < MAX_MEMORY_RETRIES:",
                "pressure <= MAX_MEMORY_RETRIES:",
            ),
        ),
        (f"{RETRIES}::test_a_run_killed_for_memory_is_run_twice_more_each_with_less_parallelism",),
    ),
    Break(
        "a failed run classified from the whole log, earlier runs included",
        (("neuronbuild/orchestrate/compile.py", "            f.seek(start)\n", ""),),
        (f"{RETRIES}::test_each_failure_is_read_from_its_own_run_of_the_log",),
    ),
    Break(
        "an unexpected exception of one unit stops the build",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "        except Exception as exc:  # a failing unit",
                "        except (OSError, ValueError) as exc:  # a failing unit",
            ),
        ),
        (f"{RETRIES}::test_any_exception_fails_only_its_unit_and_results_keep_the_units_order",),
    ),
    Break(
        "a cancelled scheduler still starts engine processes",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "        if self.cancelled.is_set():\n            raise UnitFailed(CANCELLED)\n"
                '        with open(log, "ab") as out, tethered(argv)',
                '        with open(log, "ab") as out, tethered(argv)',
            ),
        ),
        (f"{RETRIES}::test_a_cancelled_group_starts_no_process",),
    ),
    Break(
        "serve's check of variables that would make the node compile skipped",
        (
            (
                NODE_CHECKS,
                "refused = engine.refused_at_serve(environ)",
                "refused = engine.refused_at_serve({})",
            ),
        ),
        (
            f"{NODE_CLAIMS}::test_a_variable_that_would_make_the_node_compile_is_refused_even_if_all_else_matches",
        ),
    ),
    Break(
        "one --allow-mismatch name allows every difference",
        (
            (
                NODE_CHECKS,
                "refusing = [m for m in found if m.name not in allowed]",
                "refusing = [] if allowed else found",
            ),
        ),
        (f"{NODE_CLAIMS}::test_another_version_than_the_pin_is_refused_unless_allowed_by_name",),
    ),
    Break(
        "a patched copy of the pinned version passes the node check (version compared only)",
        (
            (
                NODE_CHECKS,
                "        if built[dist] != here:",
                '        if str(built[dist]).split(" ")[0] != str(here).split(" ")[0]:',
            ),
        ),
        (f"{NODE_CLAIMS}::test_a_patched_copy_of_the_pinned_version_is_refused",),
    ),
    Break(
        "an --allow-mismatch name that cannot differ accepted",
        (
            (
                NODE_CHECKS,
                "        *mismatch_names(),\n    }",
                "        *mismatch_names(),\n        *allowed,\n    }",
            ),
        ),
        (f"{NODE_CLAIMS}::test_an_allow_mismatch_name_that_cannot_differ_is_refused",),
    ),
    Break(
        "a file added to the model folder since the build goes unnoticed",
        (
            (
                NODE_CHECKS,
                "for name in sorted(set(built) | set(here)):",
                "for name in sorted(built):",
            ),
        ),
        (f"{NODE_CLAIMS}::test_a_model_file_added_or_changed_since_the_build_is_refused",),
    ),
    Break(
        "the cpu instruction set compared the wrong way round",
        (
            (
                "neuronbuild/engines/vllm_cpu/engine.py",
                "cpu_isa.provides(host, built_for)",
                "cpu_isa.provides(built_for, host)",
            ),
        ),
        (f"{NODE_CLAIMS}::test_artifacts_built_for_more_than_this_cpu_offers_are_refused",),
    ),
    Break(
        "a neuron node whose family cannot be read accepted",
        (
            (
                "neuronbuild/engines/neuron/node.py",
                "    if here == built_for:\n",
                "    if here is None or here == built_for:\n",
            ),
        ),
        (f"{NODE_CLAIMS}::test_a_neuron_node_whose_family_cannot_be_read_is_refused",),
    ),
    Break(
        "a trn1n instance read as a family of its own",
        (
            (
                "neuronbuild/engines/neuron/node.py",
                'FAMILY = re.compile(r"^(trn\\d|inf\\d)")',
                'FAMILY = re.compile(r"^(trn\\d+n?|inf\\d)")',
            ),
        ),
        (
            "tests/runtime/test_serve_node.py::test_the_neuron_family_is_read_from_the_instance_type_like_the_neuron_tools",
        ),
    ),
    Break(
        "a manifest sealed under another key schema served",
        (("runtime/serve.py", "    if schemas:\n", "    if len(schemas) > 1:\n"),),
        (f"{NODE_CLAIMS}::test_a_manifest_of_another_key_schema_asks_for_a_compile",),
    ),
    Break(
        "an edited manifest recipe passes when it plans as many units",
        (
            (
                "runtime/serve.py",
                "if not manifest.units or planned != sealed:",
                "if not manifest.units or len(planned) != len(sealed):",
            ),
        ),
        (
            f"{NODE_CLAIMS}::test_a_manifest_whose_own_recipe_plans_other_units_is_refused_as_bad_data",
        ),
    ),
    Break(
        "a recipe file of another revision served with the manifest's artifacts",
        (("runtime/serve.py", '"model", "revision", "engine_args"', '"model", "engine_args"'),),
        (
            f"{NODE_CLAIMS}::test_a_recipe_file_that_differs_from_its_manifest_is_refused_naming_the_factor",
        ),
    ),
    # Issue 19: the store wing's hand-made regressions, one line each (tests/store/test_claims_*).
    Break(
        "gc --keep-last 0 keeps every move of a ref",
        ((GC, "moves[-keep_last:] if keep_last else []", "moves[-keep_last:]"),),
        (f"{CLAIMS_GC}::test_keep_last_keeps_the_manifests_of_exactly_the_last_moves",),
    ),
    Break(
        "gc --keep-last N keeps one move too many",
        ((GC, "moves[-keep_last:] if keep_last", "moves[-keep_last - 1 :] if keep_last"),),
        (f"{CLAIMS_GC}::test_keep_last_keeps_the_manifests_of_exactly_the_last_moves",),
    ),
    Break(
        "gc drops the mark of a young unit record's blobs",
        (
            (
                GC,
                "            live_blobs.update(f.digest for f in record.files)  # an unsealed shard\n",
                "",
            ),
        ),
        (f"{CLAIMS_GC}::test_the_blobs_of_a_young_unit_record_survive_though_the_blobs_are_old",),
    ),
    Break(
        "gc spares none of the manifests racing ref moves name",
        (
            (
                GC,
                "spared = in_flight(store, now - CONDEMNED_SECONDS) & set(doomed)",
                "spared: set[str] = set()",
            ),
        ),
        (
            f"{CLAIMS_GC}::test_a_move_seen_only_by_its_history_entry_keeps_its_manifest_and_everything_it_uses",
        ),
    ),
    Break(
        "gc puts a raced manifest back but not its unit records",
        ((GC, "set(doomed) | spared\n", "set(doomed)\n"),),
        (
            f"{CLAIMS_GC}::test_a_move_seen_only_by_its_history_entry_keeps_its_manifest_and_everything_it_uses",
        ),
    ),
    Break(
        "gc sweeps the lock of a live ref",
        (
            (
                GC,
                "if not store.backend.exists(ref_path) and sweep.old(path, in_flight=True):",
                "if sweep.old(path, in_flight=True):",
            ),
        ),
        (f"{CLAIMS_GC}::test_the_lock_of_a_live_ref_stays_and_the_lock_of_a_gone_ref_goes",),
    ),
    Break(
        "gc --dry-run removes node folders",
        ((GC, "if folder is not None and not dry_run:", "if folder is not None:"),),
        (
            f"{CLAIMS_GC}::test_a_dry_run_removes_no_node_folder_and_a_real_run_removes_the_dead_ones",
        ),
    ),
    Break(
        "the lay-out stamp ignores the inode",
        (
            (
                NODE,
                "return [st.st_size, st.st_mtime_ns, st.st_ino]",
                "return [st.st_size, st.st_mtime_ns]",
            ),
        ),
        (
            f"{CLAIMS_NODE}::test_a_file_replaced_with_the_same_size_and_mtime_is_caught_by_its_inode",
        ),
    ),
    Break(
        "the lay-out stamp is trusted for another manifest",
        (
            (
                NODE,
                'if not isinstance(value, dict) or value.get("manifest") != digest:',
                "if not isinstance(value, dict):",
            ),
        ),
        (f"{CLAIMS_NODE}::test_a_stamp_holds_only_for_the_manifest_it_was_written_for",),
    ),
    Break(
        "lay_out(deep=True) trusts the stamp",
        (
            (
                NODE,
                "if not deep and laid_out(root, manifest, digest):",
                "if laid_out(root, manifest, digest):",
            ),
        ),
        (f"{CLAIMS_NODE}::test_deep_re_hashes_a_file_the_stamp_still_vouches_for",),
    ),
    Break(
        "a file already laid out is kept on its size alone",
        ((NODE, "return hash_file(dest) == (file.digest, file.size)", "return True"),),
        (
            f"{CLAIMS_NODE}::test_a_file_already_there_with_the_right_size_but_other_bytes_is_replaced",
        ),
    ),
    Break(
        "completion markers laid out first",
        (
            (
                NODE,
                "(PurePosixPath(file.path).name in last)",
                "(PurePosixPath(file.path).name not in last)",
            ),
        ),
        (f"{CLAIMS_NODE}::test_an_interrupted_lay_out_never_leaves_a_completion_marker",),
    ),
    Break(
        "the tiered store reads the local ref first",
        (
            (
                TIERED,
                "            return self.remote.get_ref(name, tag)\n",
                "            return self.local.get_ref(name, tag) or self.remote.get_ref(name, tag)\n",
            ),
        ),
        (
            f"{CLAIMS_TIERED}::test_the_remote_ref_wins_over_the_local_copy_while_the_remote_answers",
        ),
    ),
    Break(
        "the tiered store falls back on the wrong failure",
        (
            (
                TIERED,
                "        except StoreError as exc:\n            digest = self.local.get_ref",
                "        except StoreDataInvalid as exc:\n            digest = self.local.get_ref",
            ),
        ),
        (f"{CLAIMS_TIERED}::test_an_unreachable_remote_falls_back_to_the_local_ref_and_says_so",),
    ),
    Break(
        "a corrupt local manifest is not read from the remote",
        (
            (
                TIERED,
                '            except StoreDataInvalid as exc:\n                self.notes.append(f"{exc}; reading',
                '            except StoreError as exc:\n                self.notes.append(f"{exc}; reading',
            ),
        ),
        (f"{CLAIMS_TIERED}::test_a_corrupt_local_manifest_is_noted_and_read_from_the_remote",),
    ),
    Break(
        "a dry run ignores what the remote holds",
        (
            (
                TIERED,
                "if missing and self.remote is not None:\n            missing = self.remote",
                "if missing and self.remote is None:\n            missing = self.remote",
            ),
        ),
        (
            f"{CLAIMS_TIERED}::test_a_dry_run_counts_a_blob_only_the_remote_holds_and_refuses_one_no_tier_holds",
        ),
    ),
    Break(
        "a recheck keeps a corrupt manifest in the target",
        (("neuronbuild/store/transfer.py", "            dst.delete_manifest(digest)\n", ""),),
        (f"{CLAIMS_TIERED}::test_a_recheck_replaces_a_corrupt_local_manifest",),
    ),
    Break(
        "a unit record whose blobs are gone is adopted",
        (
            (
                CAS,
                "if stored is None or self.missing_blobs(stored.files) or",
                "if stored is None or",
            ),
        ),
        (f"{CLAIMS_CAS}::test_a_unit_record_whose_blobs_are_gone_is_replaced_by_the_next_build",),
    ),
    Break(
        "the presence check below the listing threshold ignores the size",
        (
            (
                CAS,
                "return self.backend.size(self.layout.blob(file.digest)) == file.size",
                "return self.backend.size(self.layout.blob(file.digest)) is not None",
            ),
        ),
        (f"{CLAIMS_CAS}::test_a_blob_of_the_wrong_size_is_missing_to_the_presence_check",),
    ),
    Break(
        "a ref moved without checking its manifest is there",
        (
            (
                CAS,
                "        if self.has_manifest(digest):\n            return None\n        if not self.is_index(digest):\n",
                "        if True:\n            return None\n        if not self.is_index(digest):\n",
            ),
        ),
        (f"{CLAIMS_CAS}::test_a_ref_never_moves_to_a_manifest_the_store_lacks",),
    ),
    Break(
        "a fetched blob written straight to its destination",
        ((CAS, 'with src, open(tmp, "wb") as out:', 'with src, open(dest, "wb") as out:'),),
        (f"{CLAIMS_CAS}::test_a_blob_whose_bytes_do_not_match_never_reaches_its_destination",),
    ),
    Break(
        "a folder read truncates an object over its limit instead of refusing it",
        ((BACKENDS, "data = f.read(limit + 1)", "data = f.read(limit)"),),
        (f"{CLAIMS_BACKENDS}::test_a_read_refuses_an_object_over_its_limit_and_returns_one_at_it",),
    ),
    Break(
        "an object-store read refuses an object exactly at its limit",
        (
            (
                BACKENDS,
                'if int(info.get("size") or 0) > limit:',
                'if int(info.get("size") or 0) >= limit:',
            ),
        ),
        (f"{CLAIMS_BACKENDS}::test_a_read_refuses_an_object_over_its_limit_and_returns_one_at_it",),
    ),
    Break(
        "last-writer-wins create overwrites what is there",
        (
            (
                BACKENDS,
                "    if backend.exists(path):\n        return False\n    backend.put(path, data)",
                "    backend.put(path, data)",
            ),
        ),
        (f"{CLAIMS_BACKENDS}::test_create_is_exclusive_and_the_first_writer_wins",),
    ),
    Break(
        "last-writer-wins swap without the compare",
        (
            (
                BACKENDS,
                "    if backend.read_versioned(path, SWAPPED_BYTES)[1] != token:",
                "    if False:",
            ),
        ),
        (f"{CLAIMS_BACKENDS}::test_a_swap_from_a_stale_version_is_refused_and_writes_nothing",),
    ),
    Break(
        "a read-only store's create answers as if it had written",
        (
            (
                BACKENDS,
                "        if self.inner.exists(path):\n            return False\n        raise self._refuse()",
                "        return False",
            ),
        ),
        (f"{CLAIMS_BACKENDS}::test_a_read_only_store_writes_nothing_and_says_how_to_write",),
    ),
    Break(
        "a copy sends again every blob the target already holds",
        (
            (
                "neuronbuild/store/transfer.py",
                "missing = dst.missing_blobs(files)",
                "missing = list(files)",
            ),
        ),
        (
            f"{CLAIMS_TRANSFER}::test_a_copy_moves_only_what_the_target_lacks_and_a_rerun_moves_nothing",
        ),
    ),
    Break(
        "verify skips the unit records",
        (("neuronbuild/orchestrate/unit_state.py", "elif records[key] is None:", "elif False:"),),
        (f"{CLAIMS_TRANSFER}::test_verify_names_a_missing_unit_record_and_a_short_blob",),
    ),
    Break(
        "verify --deep re-hashes only when not asked",
        (("neuronbuild/orchestrate/unit_state.py", "    if deep:\n", "    if not deep:\n"),),
        (f"{CLAIMS_TRANSFER}::test_only_a_deep_verify_finds_a_blob_whose_bytes_changed",),
    ),
    # Issue 46 item 18: decode buckets and the neuron engine's entries (tests/engines/test_pins_*).
    Break(
        "a decode context list that fails the list checks is checked entry by entry too",
        ((BUCKETS, "    if ctx_errors:\n        return num_seqs, None\n", ""),),
        (
            f"{PINS_BUCKETS}::test_a_misordered_decode_context_list_is_named_once_not_entry_by_entry",
            f"{PINS_BUCKETS}::test_a_non_integer_decode_context_bucket_is_refused_by_position_not_a_crash",
        ),
    ),
    Break(
        "decode bucket errors hidden behind a prefill error",
        (
            (
                BUCKETS,
                "    _check_prefix_caching(args, kv, errors)\n    num_seqs, ctx",
                "    _check_prefix_caching(args, kv, errors)\n    if errors:\n"
                "        return None, errors\n    num_seqs, ctx",
            ),
        ),
        (f"{PINS_BUCKETS}::test_a_decode_bucket_error_is_reported_beside_a_prefill_one",),
    ),
    Break(
        "a refused segment size also blamed on single-shot prefix caching",
        (
            (
                BUCKETS,
                'if args.get("max_model_len") is None or errors:',
                'if args.get("max_model_len") is None:',
            ),
        ),
        (f"{PINS_BUCKETS}::test_a_refused_segment_size_draws_no_single_shot_prefix_caching_error",),
    ),
    Break(
        "a neuron entry without its completion marker counted complete",
        (
            (
                NEURON_COMPILE,
                'needed = ("graph.hlo", f"graph_{key}.neff", COMPLETE_MARKER)',
                'needed = ("graph.hlo", f"graph_{key}.neff")',
            ),
        ),
        (f"{PINS_ENTRIES}::{ENTRY_COMPLETE}",),
    ),
    Break(
        "a neuron entry whose metadata names another key counted complete",
        ((NEURON_COMPILE, '.get("cache_key") == key:', '.get("cache_key") is not None:'),),
        (f"{PINS_ENTRIES}::{ENTRY_COMPLETE}",),
    ),
    Break(
        "rank capture folders harvested",
        (
            (
                NEURON_COMPILE,
                "        if any(RANK_DIR.match(part) for part in rel.parts[:-1]):\n            continue\n",
                "",
            ),
        ),
        (f"{PINS_ENTRIES}::{HARVEST_KEEPS}",),
    ),
    Break(
        "the .cache_accessed hit mark harvested",
        ((NEURON_COMPILE, ' or name == ".cache_accessed"', ""),),
        (f"{PINS_ENTRIES}::{HARVEST_KEEPS}",),
    ),
    Break(
        "symlinks in an entry harvested",
        (
            (
                NEURON_COMPILE,
                "if path.is_file() and not path.is_symlink():",
                "if path.is_file():",
            ),
        ),
        (f"{PINS_ENTRIES}::{HARVEST_KEEPS}",),
    ),
    Break(
        "a neuron run that left no complete entry harvested as empty",
        (
            (
                NEURON_COMPILE,
                '        if not entries:\n            raise RuntimeError(f"vLLM-Neuron wrote no '
                'complete entry under {root}")\n',
                "",
            ),
        ),
        (f"{PINS_ENTRIES}::{HARVEST_COMPLETE}",),
    ),
    Break(
        "incomplete neuron entries harvested",
        (
            (
                NEURON_COMPILE,
                'entries = [p for p in sorted(root.glob("*")) if p.is_dir() and is_complete(p)]',
                'entries = [p for p in sorted(root.glob("*")) if p.is_dir()]',
            ),
        ),
        (f"{PINS_ENTRIES}::{HARVEST_COMPLETE}",),
    ),
    Break(
        "seeded entries the run did not hit kept",
        (
            (
                NEURON_COMPILE,
                '            if not (root / name / ".cache_accessed").exists():',
                "            if False:",
            ),
        ),
        (f"{PINS_ENTRIES}::{SETTLE_DROPS}",),
    ),
    Break(
        "seeded NKI folders dropped when settling",
        ((NEURON_COMPILE, "for name in seeded - SHARED_DIRS:", "for name in seeded:"),),
        (f"{PINS_ENTRIES}::{SETTLE_DROPS}",),
    ),
    Break(
        "fewer complete entries than graphs accepted when settling",
        ((NEURON_COMPILE, "if len(entries) < len(unit.graphs):", "if False:"),),
        (f"{PINS_ENTRIES}::{SETTLE_REFUSES}",),
    ),
    Break(
        "incomplete entries counted when settling",
        (
            (
                NEURON_COMPILE,
                'entries = [p for p in root.glob("*") if p.is_dir() and is_complete(p)]',
                'entries = [p for p in root.glob("*") if p.is_dir()]',
            ),
        ),
        (f"{PINS_ENTRIES}::{SETTLE_REFUSES}",),
    ),
    Break(
        "exit 137 not read as an OOM kill",
        ((NEURON_COMPILE, "OOM_EXIT_CODES = (-9, 137)", "OOM_EXIT_CODES = (-9,)"),),
        (f"{PINS_ENTRIES}::{OOM_KILL}",),
    ),
    Break(
        "an OOM kill read as a compiler error when the log names an NCC code",
        (
            (
                NEURON_COMPILE,
                "    if exit_code in OOM_EXIT_CODES or",
                '    if ncc is not None:\n        return Failure(f"neuronx-cc error '
                '{ncc.group(1)}", "none", ncc.group(1), bucket)\n    if exit_code in OOM_EXIT_CODES or',
            ),
        ),
        (f"{PINS_ENTRIES}::{OOM_KILL}",),
    ),
    Break(
        "the neuron completion marker not laid out last",
        (
            (
                "neuronbuild/engines/neuron/engine.py",
                'written_last: ClassVar[tuple[str, ...]] = (".compilation_complete",)',
                "written_last: ClassVar[tuple[str, ...]] = ()",
            ),
        ),
        (
            f"{PINS_ENTRIES}::test_a_node_lays_out_the_neuron_completion_marker_after_every_other_file",
        ),
    ),
    Break(
        "coverage counts a neuron entry without its marker",
        (
            (
                NEURON_COVERAGE,
                '{"graph.hlo", f"graph_{entry}.neff", ".compilation_complete"} <= files',
                '{"graph.hlo", f"graph_{entry}.neff"} <= files',
            ),
        ),
        (f"{PINS_ENTRIES}::{COVERAGE_COUNTS}",),
    ),
    Break(
        "coverage counts a neuron entry without its metadata",
        ((NEURON_COVERAGE, "        and any(METADATA.match(n) for n in files)\n", ""),),
        (f"{PINS_ENTRIES}::{COVERAGE_COUNTS}",),
    ),
]

# Issue 46 item 18: gc's sweep, the lay-out stamp and the key tables (tests/*/test_pins_*).
BREAKS += [
    Break(
        "gc sweeps a manifest no ref names yet though it is young",
        (
            (
                "neuronbuild/store/gc.py",
                "doomed = [d for d in listed if d not in live and sweep.old(layout.manifest(d))]",
                "doomed = [d for d in listed if d not in live]",
            ),
        ),
        (
            "tests/store/test_pins_gc.py::test_a_manifest_no_ref_names_yet_stays_through_the_grace_period_with_what_it_uses",
        ),
    ),
    Break(
        "gc sweeps a young blob no unit record names yet",
        (
            (
                "neuronbuild/store/gc.py",
                "not in live_blobs and sweep.old(path):",
                "not in live_blobs:",
            ),
        ),
        (
            "tests/store/test_pins_gc.py::test_a_blob_no_unit_record_names_yet_stays_through_the_grace_period",
        ),
    ),
    Break(
        "gc --dry-run deletes expired leases",
        (
            (
                "neuronbuild/store/gc.py",
                "if dry_run or store.backend.delete_if(path, token):",
                "if store.backend.delete_if(path, token):",
            ),
        ),
        ("tests/store/test_pins_gc.py::test_a_dry_run_lists_an_expired_lease_and_leaves_it",),
    ),
    Break(
        "gc sweeps a condemned marker as a temporary file too (a dry run lists it twice)",
        (
            (
                "neuronbuild/store/gc.py",
                "if layout.condemned_of(path) is None and sweep.old(path, in_flight=True):",
                "if sweep.old(path, in_flight=True):",
            ),
        ),
        ("tests/store/test_pins_gc.py::test_a_stale_condemned_marker_is_listed_once",),
    ),
    Break(
        "gc sweeps a young off-chain history entry (a move in flight)",
        (
            (
                "neuronbuild/store/gc.py",
                '            if sweep.old(path):\n                sweep.delete("history", path)',
                '            if True:\n                sweep.delete("history", path)',
            ),
        ),
        (
            "tests/store/test_pins_gc.py::test_a_young_history_entry_off_the_chain_stays_and_an_old_one_goes",
        ),
    ),
    Break(
        "gc sweeps the attestations of a raced manifest it put back",
        (
            (
                "neuronbuild/store/gc.py",
                "if (attested is None or attested[0] not in kept) and sweep.old(path):",
                "if (attested is None or attested[0] not in live) and sweep.old(path):",
            ),
        ),
        (
            "tests/store/test_pins_gc.py::test_a_raced_manifest_put_back_keeps_its_attestations_and_additions",
        ),
    ),
    Break(
        "gc sweeps the additions of a raced manifest it put back",
        (
            (
                "neuronbuild/store/gc.py",
                "gone = added is None or added[0] not in kept or path in sweep.superseded",
                "gone = added is None or added[0] not in live or path in sweep.superseded",
            ),
        ),
        (
            "tests/store/test_pins_gc.py::test_a_raced_manifest_put_back_keeps_its_attestations_and_additions",
        ),
    ),
    Break(
        "gc sweeps a young attestation",
        (
            (
                "neuronbuild/store/gc.py",
                "if (attested is None or attested[0] not in kept) and sweep.old(path):",
                "if attested is None or attested[0] not in kept:",
            ),
        ),
        (
            "tests/store/test_pins_gc.py::test_a_young_timing_attestation_or_addition_whose_owner_is_gone_stays",
        ),
    ),
    Break(
        "gc sweeps a young addition",
        (("neuronbuild/store/gc.py", "        if gone and sweep.old(path):", "        if gone:"),),
        (
            "tests/store/test_pins_gc.py::test_a_young_timing_attestation_or_addition_whose_owner_is_gone_stays",
        ),
    ),
    Break(
        "gc sweeps a young timing",
        (
            (
                "neuronbuild/store/gc.py",
                "if (named is None or named[1] not in live_units) and sweep.old(path):",
                "if named is None or named[1] not in live_units:",
            ),
        ),
        (
            "tests/store/test_pins_gc.py::test_a_young_timing_attestation_or_addition_whose_owner_is_gone_stays",
        ),
    ),
    Break(
        "the lay-out stamp ignores the mtime",
        (
            (
                "neuronbuild/node/materialize.py",
                "return [st.st_size, st.st_mtime_ns, st.st_ino]",
                "return [st.st_size, st.st_ino]",
            ),
        ),
        (
            "tests/store/test_pins_node_stat.py::test_a_file_changed_in_place_with_its_size_and_inode_kept_is_caught_by_its_mtime",
        ),
    ),
    Break(
        "the lay-out stamp ignores the size",
        (
            (
                "neuronbuild/node/materialize.py",
                "return [st.st_size, st.st_mtime_ns, st.st_ino]",
                "return [st.st_mtime_ns, st.st_ino]",
            ),
        ),
        (
            "tests/store/test_pins_node_stat.py::test_a_file_changed_in_place_with_its_mtime_and_inode_kept_is_caught_by_its_size",
        ),
    ),
    Break(
        "a lay-out stamp over the record limit is read",
        (
            (
                "neuronbuild/node/materialize.py",
                "if not stamp.is_file() or stamp.stat().st_size > MAX_RECORD_BYTES:",
                "if not stamp.is_file():",
            ),
        ),
        ("tests/store/test_pins_node_stat.py::test_a_stamp_over_the_record_limit_is_never_read",),
    ),
    Break(
        "a serve that waited for the lock lays the root out again",
        (
            (
                "neuronbuild/node/materialize.py",
                "        if not deep and laid_out(root, manifest, digest):  # another serve laid it out meanwhile",
                "        if False:",
            ),
        ),
        (
            "tests/store/test_pins_node_stat.py::test_a_serve_that_waited_for_another_laying_out_the_root_takes_its_lay_out",
        ),
    ),
    Break(
        "the lay-out stamp checks only the first file",
        (
            (
                "neuronbuild/node/materialize.py",
                "    for file in manifest.files():\n        dest = root / file.path\n        try:",
                "    for file in manifest.files()[:1]:\n        dest = root / file.path\n        try:",
            ),
        ),
        (
            "tests/store/test_pins_node_stat.py::test_the_stamp_vouches_for_every_file_not_only_the_first",
        ),
    ),
    Break(
        "hf_token keyed (moved from serving-only)",
        (
            ("neuronbuild/engines/arg_classes.py", '        "hf_token",\n', ""),
            (
                "neuronbuild/engines/arg_classes.py",
                '        "kda_decode_backend",\n',
                '        "kda_decode_backend",\n        "hf_token",\n',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_each_argument_that_only_serves_is_serving_only",),
    ),
    Break(
        "master_port keyed (moved from serving-only)",
        (
            ("neuronbuild/engines/arg_classes.py", '        "master_port",\n', ""),
            (
                "neuronbuild/engines/arg_classes.py",
                '        "kda_decode_backend",\n',
                '        "kda_decode_backend",\n        "master_port",\n',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_each_argument_that_only_serves_is_serving_only",),
    ),
    Break(
        "disable_log_stats keyed (moved from serving-only)",
        (
            ("neuronbuild/engines/arg_classes.py", '        "disable_log_stats",\n', ""),
            (
                "neuronbuild/engines/arg_classes.py",
                '        "kda_decode_backend",\n',
                '        "kda_decode_backend",\n        "disable_log_stats",\n',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_each_argument_that_only_serves_is_serving_only",),
    ),
    Break(
        "enforce_eager serving-only (moved from keyed)",
        (
            ("neuronbuild/engines/arg_classes.py", '        "enforce_eager",\n', ""),
            (
                "neuronbuild/engines/arg_classes.py",
                '        "fail_on_environ_validation",\n',
                '        "fail_on_environ_validation",\n        "enforce_eager",\n',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_each_argument_that_shapes_a_graph_is_keyed",),
    ),
    Break(
        "compilation_config serving-only (moved from keyed)",
        (
            ("neuronbuild/engines/arg_classes.py", '        "compilation_config",\n', ""),
            (
                "neuronbuild/engines/arg_classes.py",
                '        "fail_on_environ_validation",\n',
                '        "fail_on_environ_validation",\n        "compilation_config",\n',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_each_argument_that_shapes_a_graph_is_keyed",),
    ),
    Break(
        "quantization serving-only (moved from keyed)",
        (
            ("neuronbuild/engines/arg_classes.py", '        "quantization",\n', ""),
            (
                "neuronbuild/engines/arg_classes.py",
                '        "fail_on_environ_validation",\n',
                '        "fail_on_environ_validation",\n        "quantization",\n',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_each_argument_that_shapes_a_graph_is_keyed",),
    ),
    Break(
        "gpu_memory_utilization serving-only (moved from keyed)",
        (
            ("neuronbuild/engines/arg_classes.py", '        "gpu_memory_utilization",\n', ""),
            (
                "neuronbuild/engines/arg_classes.py",
                '        "fail_on_environ_validation",\n',
                '        "fail_on_environ_validation",\n        "gpu_memory_utilization",\n',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_each_argument_that_shapes_a_graph_is_keyed",),
    ),
    Break(
        "tokenizer serving-only (moved from keyed)",
        (
            ("neuronbuild/engines/arg_classes.py", '        "tokenizer",\n', ""),
            (
                "neuronbuild/engines/arg_classes.py",
                '        "fail_on_environ_validation",\n',
                '        "fail_on_environ_validation",\n        "tokenizer",\n',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_each_argument_that_shapes_a_graph_is_keyed",),
    ),
    Break(
        "trust_remote_code serving-only (moved from keyed)",
        (
            ("neuronbuild/engines/arg_classes.py", '        "trust_remote_code",\n', ""),
            (
                "neuronbuild/engines/arg_classes.py",
                '        "fail_on_environ_validation",\n',
                '        "fail_on_environ_validation",\n        "trust_remote_code",\n',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_each_argument_that_shapes_a_graph_is_keyed",),
    ),
    Break(
        "a name ending _HOME not taken for a path",
        (
            (
                "neuronbuild/engines/env_classes.py",
                'PATH_SUFFIXES = ("_DIR", "_PATH", "_HOME", "_ROOT", "_FILE", "_FOLDER")',
                'PATH_SUFFIXES = ("_DIR", "_PATH", "_ROOT", "_FILE", "_FOLDER")',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_a_name_ending_as_a_path_does_holds_a_path",),
    ),
    Break(
        "a name ending _FILE not taken for a path",
        (
            (
                "neuronbuild/engines/env_classes.py",
                'PATH_SUFFIXES = ("_DIR", "_PATH", "_HOME", "_ROOT", "_FILE", "_FOLDER")',
                'PATH_SUFFIXES = ("_DIR", "_PATH", "_HOME", "_ROOT", "_FOLDER")',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_a_name_ending_as_a_path_does_holds_a_path",),
    ),
    Break(
        "a name ending _FOLDER not taken for a path",
        (
            (
                "neuronbuild/engines/env_classes.py",
                'PATH_SUFFIXES = ("_DIR", "_PATH", "_HOME", "_ROOT", "_FILE", "_FOLDER")',
                'PATH_SUFFIXES = ("_DIR", "_PATH", "_HOME", "_ROOT", "_FILE")',
            ),
        ),
        ("tests/test_pins_key_tables.py::test_a_name_ending_as_a_path_does_holds_a_path",),
    ),
    Break(
        "generation_config.json left out of the model_files factor",
        (("neuronbuild/model_files.py", '    "generation_config.json",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_each_file_a_compile_reads_enters_the_model_files_factor",
        ),
    ),
    Break(
        "tokenizer_config.json left out of the model_files factor",
        (("neuronbuild/model_files.py", '    "tokenizer_config.json",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_each_file_a_compile_reads_enters_the_model_files_factor",
        ),
    ),
    Break(
        "special_tokens_map.json left out of the model_files factor",
        (("neuronbuild/model_files.py", '    "special_tokens_map.json",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_each_file_a_compile_reads_enters_the_model_files_factor",
        ),
    ),
    Break(
        "tokenizer.model left out of the model_files factor",
        (("neuronbuild/model_files.py", '    "tokenizer.model",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_each_file_a_compile_reads_enters_the_model_files_factor",
        ),
    ),
    Break(
        "chat_template.jinja left out of the model_files factor",
        (("neuronbuild/model_files.py", '    "chat_template.jinja",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_each_file_a_compile_reads_enters_the_model_files_factor",
        ),
    ),
    Break(
        "preprocessor_config.json left out of the model_files factor",
        (("neuronbuild/model_files.py", '    "preprocessor_config.json",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_each_file_a_compile_reads_enters_the_model_files_factor",
        ),
    ),
    Break(
        "model.safetensors.index.json left out of the model_files factor",
        (("neuronbuild/model_files.py", '    "model.safetensors.index.json",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_each_file_a_compile_reads_enters_the_model_files_factor",
        ),
    ),
    Break(
        "pytorch_model.bin.index.json left out of the model_files factor",
        (("neuronbuild/model_files.py", '    "pytorch_model.bin.index.json",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_each_file_a_compile_reads_enters_the_model_files_factor",
        ),
    ),
    Break(
        "vocab.json left out of the model_files factor",
        (("neuronbuild/model_files.py", '    "vocab.json",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_each_file_a_compile_reads_enters_the_model_files_factor",
        ),
    ),
    Break(
        "merges.txt left out of the model_files factor",
        (("neuronbuild/model_files.py", '    "merges.txt",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_each_file_a_compile_reads_enters_the_model_files_factor",
        ),
    ),
    Break(
        "un-indexed .bin weights left out of the model_files factor",
        (
            (
                "neuronbuild/model_files.py",
                'WEIGHT_SUFFIXES = (".safetensors", ".bin")',
                'WEIGHT_SUFFIXES = (".safetensors",)',
            ),
        ),
        (
            "tests/test_pins_key_tables.py::test_without_an_index_each_weight_file_enters_by_its_size",
        ),
    ),
    Break(
        "un-indexed weights keyed by presence, not size",
        (
            (
                "neuronbuild/model_files.py",
                'out[path.name] = f"size:{path.stat().st_size}"',
                'out[path.name] = "present"',
            ),
        ),
        (
            "tests/test_pins_key_tables.py::test_without_an_index_each_weight_file_enters_by_its_size",
        ),
    ),
    Break(
        "weight sizes keyed beside an index",
        (
            (
                "neuronbuild/model_files.py",
                '    if not any(name.endswith(".index.json") for name in out):',
                "    if True:",
            ),
        ),
        (
            "tests/test_pins_key_tables.py::test_with_an_index_the_weight_files_stay_out_of_the_factor",
        ),
    ),
    Break(
        "a installed difference labelled as the recipe's",
        (("neuronbuild/keys.py", '    "installed": "this host",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_doctor_and_serve_label_each_factor_with_where_its_value_came_from",
        ),
    ),
    Break(
        "a model_files difference labelled as the recipe's",
        (("neuronbuild/keys.py", '    "model_files": "model folder",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_doctor_and_serve_label_each_factor_with_where_its_value_came_from",
        ),
    ),
    Break(
        "a schema difference labelled as the recipe's",
        (("neuronbuild/keys.py", '    "schema": "neuronbuild",\n', ""),),
        (
            "tests/test_pins_key_tables.py::test_doctor_and_serve_label_each_factor_with_where_its_value_came_from",
        ),
    ),
]


BREAKS.append(
    Break(
        "a symlink to the right bytes, planted where a laid-out file belongs, kept as intact",
        (
            (
                "neuronbuild/node/materialize.py",
                "    if dest.is_symlink() or not dest.is_file() or dest.stat().st_size != file.size:",
                "    if not dest.is_file() or dest.stat().st_size != file.size:",
            ),
        ),
        (
            "tests/store/test_pins_node_stat.py::"
            "test_a_symlink_planted_where_a_file_belongs_is_replaced_by_the_file",
        ),
    )
)
BREAKS.append(
    Break(
        "a symlink planted where a laid-out file belongs is written through",
        (
            (
                "neuronbuild/paths.py",
                "    return folder / path.name\n",
                "    return (folder / path.name).resolve()\n",
            ),
        ),
        (
            "tests/store/test_pins_node_stat.py::"
            "test_a_symlink_planted_where_a_file_belongs_is_replaced_by_the_file",
        ),
    )
)


# Issue 46 item 18: the scheduler's process groups and tether, sealing, leases.
BREAKS += [
    Break(
        "an engine run shares neuronbuild's session and process group",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "                start_new_session=True,\n                pass_fds",
                "                start_new_session=False,\n                pass_fds",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_an_engine_runs_in_a_session_and_process_group_of_its_own",
        ),
    ),
    Break(
        "helpers an engine leaves in its group outlive the run",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "                end_group(proc.pid, reap=proc.poll)\n            if self.cancelled",
                "            if self.cancelled",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_a_helper_an_engine_leaves_in_its_group_ends_with_the_run_without_the_tether",
        ),
    ),
    Break(
        "ending a group never SIGKILLs what outlives the grace",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "        os.killpg(pgid, signal.SIGKILL)",
                "        pass",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_ending_a_group_sigkills_what_outlives_the_grace",
        ),
    ),
    Break(
        "ending a group waits out the grace after the group is empty",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "        except (ProcessLookupError, PermissionError):\n            return\n",
                "        except (ProcessLookupError, PermissionError):\n            pass\n",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_ending_a_group_returns_once_its_reaped_leader_left_on_sigterm",
        ),
    ),
    Break(
        "ending a group leaves its leader a zombie and waits out the grace",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "        if reap is not None:\n            reap()\n",
                "",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_ending_a_group_returns_once_its_reaped_leader_left_on_sigterm",
        ),
    ),
    Break(
        "a run a cancel ended returns its exit code, not cancelled",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "            if self.cancelled.is_set():\n                raise UnitFailed(CANCELLED)\n            return code",
                "            return code",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_a_run_a_cancel_ended_says_cancelled_not_its_exit_code",
        ),
    ),
    Break(
        "a cancelled scheduler still claims units",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "claim(unit) if claim is not None and not groups.cancelled.is_set() else held",
                "claim(unit) if claim is not None else held",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_a_cancelled_scheduler_asks_no_more_claims",
        ),
    ),
    Break(
        "a unit's claim (lease) is not released when it ends",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "            if held is not None:\n                held.release()",
                "            pass",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_every_claim_is_released_however_its_unit_ended",
        ),
    ),
    Break(
        "a timeout kills the tether alone, leaving helpers out of the group",
        (
            (
                "neuronbuild/orchestrate/scheduler.py",
                "                end_group(proc.pid, reap=proc.poll)\n                proc.wait()\n",
                "                proc.kill()\n                proc.wait()\n",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_a_timeout_ends_a_helper_that_left_the_engines_group",
        ),
    ),
    Break(
        "the tether leaves what its engine left when the engine exits",
        (
            (
                "neuronbuild/orchestrate/tether.py",
                "    end_leftovers(start + GRACE_SECONDS - 1.0)",
                "    pass",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_the_tether_ends_an_orphaned_helper_out_of_its_group_when_the_engine_exits",
        ),
    ),
    Break(
        "the tether is no subreaper: orphaned helpers escape it",
        (
            (
                "neuronbuild/orchestrate/tether.py",
                "        call(PR_SET_CHILD_SUBREAPER, 1)",
                "        pass",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_the_tether_ends_an_orphaned_helper_out_of_its_group_when_the_engine_exits",
        ),
    ),
    Break(
        "an engine outlives its tether killed alone",
        (
            (
                "neuronbuild/orchestrate/tether.py",
                "            call(PR_SET_PDEATHSIG, signal.SIGKILL)",
                "            pass",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_an_engine_dies_with_its_tether_killed_alone",
        ),
    ),
    Break(
        "a tether whose builder is gone exits 0 instead of SIGKILLing its group",
        (
            (
                "neuronbuild/orchestrate/tether.py",
                "    os.killpg(0, signal.SIGKILL)",
                "    os._exit(0)",
            ),
        ),
        (
            "tests/orchestrate/test_pins_scheduler.py::test_a_tether_whose_builder_is_gone_ends_its_engine_and_itself_by_sigkill",
        ),
    ),
    Break(
        "seal seals a build with units missing",
        (
            (
                "neuronbuild/orchestrate/seal.py",
                "    if report.missing:\n        if shards",
                "    if False:\n        if shards",
            ),
        ),
        (
            "tests/orchestrate/test_pins_seal.py::test_a_build_whose_unit_record_is_missing_is_named_with_its_shard_and_not_sealed",
        ),
    ),
    Break(
        "seal seals a build one of whose blobs is missing",
        (
            (
                "neuronbuild/orchestrate/seal.py",
                "lost = [f.path for f in record.files if f.digest in gone]",
                "lost = []",
            ),
        ),
        (
            "tests/orchestrate/test_pins_seal.py::test_a_build_whose_blob_is_missing_is_named_and_not_sealed",
        ),
    ),
    Break(
        "a refused ref move of one recipe leaves other recipes' refs moved",
        (
            (
                "neuronbuild/orchestrate/seal.py",
                "            precheck(store, name, tag, plain.get(name), ask)",
                "            pass",
            ),
        ),
        (
            "tests/orchestrate/test_pins_seal.py::test_a_refused_move_of_one_recipes_ref_moves_no_other_ref",
        ),
    ),
    Break(
        "seal takes two recipes of one name",
        (("neuronbuild/orchestrate/seal.py", "    check_families(plans)\n", ""),),
        (
            "tests/orchestrate/test_pins_seal.py::test_seal_refuses_two_recipes_of_one_name_before_writing_anything",
        ),
    ),
    Break(
        "a missing unit is not named with the shard that owns it",
        (
            (
                "neuronbuild/orchestrate/seal.py",
                "MissingUnit(m.recipe, m.key, m.label, m.why, owner[m.key])",
                "MissingUnit(m.recipe, m.key, m.label, m.why, None)",
            ),
        ),
        (
            "tests/orchestrate/test_pins_seal.py::test_a_build_whose_unit_record_is_missing_is_named_with_its_shard_and_not_sealed",
        ),
    ),
    Break(
        "refs of two recipes are not prechecked before the first moves",
        (
            (
                "neuronbuild/orchestrate/seal.py",
                "    if len(by_name) > 1:",
                "    if len(by_name) > 2:",
            ),
        ),
        (
            "tests/orchestrate/test_pins_seal.py::test_a_refused_move_of_one_recipes_ref_moves_no_other_ref",
        ),
    ),
    Break(
        "a takeover that lost the swap race still holds the lease",
        (
            (
                "neuronbuild/store/leases.py",
                "        except SwapConflict:\n            return None\n        return Lease(self, key, owner)",
                "        except SwapConflict:\n            pass\n        return Lease(self, key, owner)",
            ),
        ),
        (
            "tests/store/test_pins_leases.py::test_a_takeover_that_loses_the_swap_race_takes_nothing",
        ),
    ),
    Break(
        "a lease with no time is taken as expired",
        (
            (
                "neuronbuild/store/leases.py",
                "expired = when is not None and when < self._now() - self.times.lease",
                "expired = when is None or when < self._now() - self.times.lease",
            ),
        ),
        ("tests/store/test_pins_leases.py::test_a_lease_with_no_time_at_all_is_live",),
    ),
    Break(
        "a lease released in between is held without winning its create",
        (
            (
                "neuronbuild/store/leases.py",
                "return Lease(self, key, None) if self.backend.create(path, self._bytes()) else None",
                "return Lease(self, key, None)",
            ),
        ),
        (
            "tests/store/test_pins_leases.py::test_a_lease_released_in_between_is_taken_only_by_a_create_that_wins",
        ),
    ),
    Break(
        "a builder renews a lease another builder took over",
        (
            (
                "neuronbuild/store/leases.py",
                "found[1] if found is not None and found[0] == self.owner else None",
                "found[1] if found is not None else None",
            ),
        ),
        (
            "tests/store/test_pins_leases.py::test_a_renewal_after_a_takeover_fails_and_leaves_the_new_owners_lease",
        ),
    ),
    Break(
        "a renewal of a lease no longer ours is attempted",
        (
            (
                "neuronbuild/store/leases.py",
                "        if token is None:\n            return False\n        self.backend.swap",
                "        self.backend.swap",
            ),
        ),
        (
            "tests/store/test_pins_leases.py::test_a_renewal_after_a_takeover_fails_and_leaves_the_new_owners_lease",
        ),
    ),
    Break(
        "the renew thread runs on after a takeover",
        (
            (
                "neuronbuild/store/leases.py",
                "                if not self.leases.renew(self.key):\n                    return",
                "                if not self.leases.renew(self.key):\n                    continue",
            ),
        ),
        (
            "tests/store/test_pins_leases.py::test_the_renewing_thread_stops_once_another_builder_took_the_lease_over",
        ),
    ),
    Break(
        "lease expiry judged by the builder's clock, not the store's",
        (
            (
                "neuronbuild/store/leases.py",
                "self._offset = store_now(self.store) - time.time()",
                "self._offset = 0.0",
            ),
        ),
        (
            "tests/store/test_pins_leases.py::test_expiry_is_judged_by_the_stores_clock_not_the_builders",
        ),
    ),
    Break(
        "an expired lease still names a holder",
        (
            (
                "neuronbuild/store/leases.py",
                "return found[0] if found is not None and not found[2] else None",
                "return found[0] if found is not None else None",
            ),
        ),
        ("tests/store/test_pins_leases.py::test_an_expired_lease_has_no_holder",),
    ),
    Break(
        "a Neuron recipe's vLLM is not judged by its CPU build's shipped table",
        (
            (
                "neuronbuild/engines/arg_sources.py",
                'CPU_BUILD = {"vllm": "vllm-cpu"}',
                "CPU_BUILD: dict[str, str] = {}",
            ),
        ),
        (
            "tests/engines/test_arg_sources.py::test_a_trn2_recipe_on_vllm_0_24_is_judged_by_vllm_0_24s_own_choices",
        ),
    ),
    Break(
        "validate never compares max_model_len with the model's position limit",
        (
            (
                "neuronbuild/engines/model_limits.py",
                "if limit is None or max_model_len <= limit[0]:",
                "if True:",
            ),
        ),
        ("tests/engines/test_model_limits.py",),
    ),
    Break(
        "a RoPE scaling is not seen, so a scaled model's longer context is refused",
        (
            (
                "neuronbuild/engines/model_limits.py",
                "    return (\n        rope.get(",
                "    return False and (\n        rope.get(",
            ),
        ),
        ("tests/engines/test_model_limits.py",),
    ),
    Break(
        "a failed unit's summary quotes pydantic's header only, not the field and message",
        (("neuronbuild/engines/compiler.py", "    if _VALIDATION.search(said):", "    if False:"),),
        (
            "tests/orchestrate/test_engine_error_line.py::test_a_config_validation_error_names_the_field_and_what_is_wrong",
        ),
    ),
    Break(
        "a hub model's config is not read from the Hugging Face cache",
        (
            (
                "neuronbuild/model_files.py",
                "    if not is_hub_id(model, workdir):\n        return None",
                "    if True:\n        return None",
            ),
        ),
        (
            "tests/engines/test_neuron_phases.py::test_the_qwen3_vl_recipe_compiles_every_graph_and_serves_them",
            "tests/engines/test_hub_config.py",
        ),
    ),
    Break(
        "validate leaves decode context parallelism's platform checks to the compile host",
        (
            (
                "neuronbuild/engines/neuron/engine.py",
                "        dcp = dcp_errors(recipe.engine_args, self.model(recipe))",
                "        dcp: list[RecipeError] = []",
            ),
        ),
        ("tests/engines/test_neuron_dcp.py",),
    ),
    Break(
        "the DCP head check compares TP with the KV heads alone",
        (
            (
                "neuronbuild/engines/neuron/dcp.py",
                "if kv_heads is not None and tp < dcp * kv_heads:",
                "if kv_heads is not None and tp < kv_heads:",
            ),
        ),
        ("tests/engines/test_neuron_dcp.py",),
    ),
    Break(
        "the double starts a recipe the plugin's DCP validation refuses",
        (
            (
                "tests/neuron_double/site/vllm_neuron/platform.py",
                "    validate_dcp(args, config)\n",
                "",
            ),
        ),
        (
            "tests/engines/test_neuron_conformance.py::test_the_double_refuses_at_start_what_the_plugin_refuses",
        ),
    ),
    Break(
        "Qwen3.5's vision merge factor is dropped from the plan (issue 42)",
        (
            (
                "neuronbuild/engines/neuron/model.py",
                '    "Qwen3_5ForConditionalGeneration",\n',
                "",
            ),
        ),
        (
            "tests/engines/test_neuron_conformance.py::test_the_plan_equals_what_the_double_extracts_graph_for_graph",
        ),
    ),
    Break(
        "a hub model's config is read at the newest snapshot, not the recipe's revision",
        (
            (
                "neuronbuild/model_files.py",
                'try_to_load_from_cache(model, "config.json", revision=revision or "main")',
                'try_to_load_from_cache(model, "config.json")',
            ),
        ),
        ("tests/engines/test_hub_config.py::test_the_config_of_another_revision_is_not_read",),
    ),
    Break(
        "the kit runs its negative start whether or not the complete build served",
        (("runtime/conformance.py", '    if start.status == "PASS":\n', "    if True:\n"),),
        (
            "tests/runtime/test_conformance.py::test_a_broken_build_fails_the_kit_before_any_negative_check",
        ),
    ),
    Break(
        "C1 passes on a miss of any entry, not only the removed one",
        (
            (
                "neuronbuild/engines/neuron/conformance.py",
                "    if not any(outcome.removed in line for line in misses):",
                "    if False:",
            ),
        ),
        ("tests/runtime/test_conformance.py::test_only_a_start_that_fails_on_the_miss_passes",),
    ),
    Break(
        "S0 passes a start that did not serve",
        (
            (
                "neuronbuild/engines/neuron/conformance.py",
                "    if not start.served:\n",
                "    if False:\n",
            ),
        ),
        (
            "tests/runtime/test_conformance.py::test_a_broken_build_fails_the_kit_before_any_negative_check",
        ),
    ),
    Break(
        "the neuron unit key leaves out block_size, which vLLM-Neuron's cache key hashes",
        (
            (
                "neuronbuild/engines/neuron/engine.py",
                "        resolved: dict[str, Any] = normalise(args)  # one spelling per value",
                '        args.pop("block_size", None)\n'
                "        resolved: dict[str, Any] = normalise(args)  # one spelling per value",
            ),
        ),
        (
            "tests/engines/test_neuron_conformance.py::test_a_change_that_changes_a_compiled_graph_changes_a_unit_key",
        ),
    ),
    Break(
        "gc with no grace period sweeps a temporary file or lock a live writer holds",
        (
            (
                "neuronbuild/store/gc.py",
                "        cutoff = self.in_flight_cutoff if in_flight else self.cutoff",
                "        cutoff = self.cutoff",
            ),
        ),
        ("tests/store/test_claims_gc.py::test_no_grace_period_sweeps_what_a_live_writer_holds",),
    ),
    Break(
        "gc with no grace period aborts a multipart upload a live writer is sending",
        (
            (
                "neuronbuild/store/gc.py",
                "abort_abandoned_uploads(sweep.in_flight_cutoff, dry_run)",
                "abort_abandoned_uploads(sweep.cutoff, dry_run)",
            ),
        ),
        ("tests/store/test_claims_gc.py::test_no_grace_period_sweeps_what_a_live_writer_holds",),
    ),
    Break(
        "a policy accepts a signature without checking what its Statement binds",
        (
            (
                "neuronbuild/attest/policy.py",
                "        return binding_problem(attestation.subject_name, attestation.predicate, ref, manifest)",
                "        return None",
            ),
        ),
        (
            "tests/attest/test_bindings.py::test_a_ref_pointed_at_another_recipes_signed_build_is_refused",
            "tests/attest/test_bindings.py::test_a_signed_statement_that_describes_another_build_is_refused",
        ),
    ),
    Break(
        "a signature over another recipe's build passes under any ref name (mix-and-match)",
        (("neuronbuild/attest/statement.py", "    if name != ref_name:", "    if False:"),),
        (
            "tests/attest/test_bindings.py::test_a_ref_pointed_at_another_recipes_signed_build_is_refused",
        ),
    ),
    Break(
        "a Statement's toolchain is not compared with its manifest's",
        (
            (
                "neuronbuild/attest/statement.py",
                '        and internal.get("toolchain") == dict(sorted(toolchain.items()))',
                "",
            ),
        ),
        (
            "tests/attest/test_bindings.py::test_a_signed_statement_that_describes_another_build_is_refused",
        ),
    ),
    Break(
        "a node serves a ref moved back to an older signed build",
        (
            (
                "neuronbuild/attest/served.py",
                '        if older and not rollback and seen.get("manifest") != digest:',
                "        if False:",
            ),
        ),
        (
            "tests/attest/test_rollback.py::test_a_ref_moved_back_to_an_older_signed_build_is_refused",
            "tests/attest/test_rollback.py::test_a_signed_rollback_needs_no_flag_and_the_same_build_is_never_a_rollback",
        ),
    ),
    Break(
        "a node forgets what it served (no record written)",
        (("neuronbuild/attest/served.py", "        table[key] = {", "        {"),),
        (
            "tests/attest/test_rollback.py::test_a_ref_moved_back_to_an_older_signed_build_is_refused",
        ),
    ),
    Break(
        "a node refuses a newer signature of the build it served as a rollback",
        (
            (
                "neuronbuild/attest/served.py",
                ' and seen.get("manifest") != digest:',
                ":",
            ),
        ),
        (
            "tests/attest/test_rollback.py::test_a_signed_rollback_needs_no_flag_and_the_same_build_is_never_a_rollback",
        ),
    ),
    Break(
        "a rule's max_age_days is never enforced (freeze)",
        (
            (
                "neuronbuild/attest/policy.py",
                "        if rule.max_age_days is None:\n            return None",
                "        if True:\n            return None",
            ),
        ),
        ("tests/attest/test_rollback.py::test_a_rule_with_max_age_days_refuses_a_stale_signature",),
    ),
    Break(
        "a revoked key's signature still counts",
        (
            (
                "neuronbuild/attest/policy.py",
                "        if keyid in self.revoked:",
                "        if False:",
            ),
        ),
        (
            "tests/attest/test_key_lifecycle.py::test_a_revoked_key_signs_nothing_and_its_builds_are_signed_again",
        ),
    ),
    Break(
        "a key is expired before its expires date",
        (("neuronbuild/attest/policy.py", " and now >= expires:", ":"),),
        ("tests/attest/test_key_lifecycle.py::test_an_expiry_in_the_future_changes_nothing",),
    ),
    Break(
        "an expired key's signature still counts",
        (
            (
                "neuronbuild/attest/policy.py",
                "                expires = trusted.expires",
                "                expires = None",
            ),
        ),
        (
            "tests/attest/test_key_lifecycle.py::test_a_key_is_rotated_by_listing_the_next_and_letting_the_old_expire",
        ),
    ),
    Break(
        "a rule's threshold is never enforced",
        (
            (
                "neuronbuild/attest/policy.py",
                "        if len(names) >= rule.threshold:",
                "        if names:",
            ),
        ),
        ("tests/attest/test_key_lifecycle.py::test_a_threshold_needs_that_many_signers",),
    ),
    Break(
        "two keys of one signer count as two signers",
        (
            (
                "neuronbuild/attest/policy.py",
                "        names = sorted({name for name, _ in accepted})",
                "        names = [name for name, _ in accepted]",
            ),
        ),
        ("tests/attest/test_key_lifecycle.py::test_a_threshold_needs_that_many_signers",),
    ),
    Break(
        "a keyless signer's required certificate claims are not checked",
        (("neuronbuild/attest/keyless.py", "        if self.claims:", "        if False:"),),
        (
            "tests/attest/test_keyless.py::test_a_reusable_workflows_identity_is_accepted_only_from_the_callers_the_policy_names",
        ),
    ),
    Break(
        "a keyless signature's age is the Statement's claim, not Rekor's time",
        (
            (
                "neuronbuild/attest/policy.py",
                "logged = logged_time(attestation.bundle)",
                "logged = signed_time(attestation.predicate)",
            ),
        ),
        (
            "tests/attest/test_keyless.py::test_a_keyless_signatures_age_is_rekors_not_the_statements",
        ),
    ),
    Break(
        "the CLI prints a URL's password and signature",
        (
            (
                "neuronbuild/ui/streams.py",
                "            self._stream.write(redact(text))",
                "            self._stream.write(text)",
            ),
        ),
        ("tests/test_secrets.py::test_no_planted_secret_reaches_any_output",),
    ),
    Break(
        "a presigned URL's query values are printed",
        (("neuronbuild/ui/redact.py", "    if mark:", "    if False:"),),
        ("tests/test_secrets.py::test_redact_cuts_userinfo_and_query_values_and_keeps_the_rest",),
    ),
    Break(
        "a recipe may hold a credential",
        (
            (
                "neuronbuild/recipe.py",
                "    credentials = _credential_errors(data, arg_source.tables)",
                "    credentials: list[RecipeError] = []",
            ),
        ),
        ("tests/test_secrets.py::test_a_credential_in_a_recipe_is_refused_without_echoing_it",),
    ),
    Break(
        "a node image's files are trusted by its own stamp, never hashed",
        (
            (
                "neuronbuild/node/image_stamp.py",
                "    if not deep and read_record(record) == seen:",
                "    if not deep:",
            ),
        ),
        (
            "tests/image/test_serve_image.py::test_a_forged_image_of_the_stamps_sizes_and_times_is_refused_at_its_first_start",
        ),
    ),
    Break(
        "the node's record of an image check ignores ctime (a file written in place passes)",
        (
            (
                "neuronbuild/node/image_stamp.py",
                "st.st_mtime_ns, st.st_ctime_ns]",
                "st.st_mtime_ns]",
            ),
        ),
        (
            "tests/image/test_serve_image.py::test_a_repeat_start_trusts_the_nodes_record_until_a_file_changes",
        ),
    ),
    Break(
        "a keyless signature's time is trusted without the inclusion promise that signs it",
        (
            (
                "neuronbuild/attest/keyless.py",
                "return float(value) if value and entry.inclusion_promise else None",
                "return float(value) if value else None",
            ),
        ),
        (
            "tests/attest/test_keyless.py::test_a_bundle_without_an_inclusion_promise_states_no_time",
        ),
    ),
    Break(
        "click's binary writes under an ASCII stream are not redacted",
        (
            (
                "neuronbuild/ui/streams.py",
                "        return _RedactedBytes(self._stream.buffer, self._label)",
                "        return self._stream.buffer",
            ),
        ),
        (
            "tests/test_secrets.py::test_a_secret_holding_a_slash_and_an_ascii_stream_are_redacted_too",
        ),
    ),
    Break(
        "a node that cannot write its served record serves anyway (rollback forgotten)",
        (
            (
                "neuronbuild/attest/served.py",
                "    except OSError as exc:  # a node that cannot keep the record",
                "    except OSError:  # a node that cannot keep the record\n        return\n    except ValueError as exc:",
            ),
        ),
        (
            "tests/attest/test_rollback.py::test_a_node_that_cannot_keep_its_record_refuses_in_one_line",
        ),
    ),
    Break(
        "a revoked node key's addition is laid out",
        (
            (
                "neuronbuild/attest/policy.py",
                "        keys = [k for k in every if self.unusable(k.keyid, now) is None]",
                "        keys = every",
            ),
        ),
        (
            "tests/attest/test_additions.py::test_an_addition_signed_by_a_revoked_node_key_is_not_laid_out_and_says_so",
        ),
    ),
    Break(
        "verify --json calls a revoked key's signature verified",
        (
            (
                "neuronbuild/attest/inspect.py",
                '            entry["verified"] = by is not None and void is None',
                '            entry["verified"] = by is not None',
            ),
        ),
        (
            "tests/attest/test_key_lifecycle.py::test_a_revoked_key_signs_nothing_and_its_builds_are_signed_again",
        ),
    ),
    Break(
        "the image's own attestation names the neuronbuild manifest, not the image",
        (
            (
                "neuronbuild/attest/statement.py",
                '        "subject": [{"name": name, "digest": {"sha256": hex_of(image)}}],',
                '        "subject": [{"name": name, "digest": {"sha256": hex_of(digest)}}],',
            ),
        ),
        (
            "tests/image/test_image.py::test_the_image_signed_with_key_names_its_own_digest_as_the_in_toto_subject",
        ),
    ),
    Break(
        "image --key signs nothing",
        (
            (
                "neuronbuild/image/build.py",
                "    if signer is not None:",
                "    if signer is not None and False:",
            ),
        ),
        (
            "tests/image/test_image.py::test_the_image_signed_with_key_names_its_own_digest_as_the_in_toto_subject",
        ),
    ),
    Break(
        "serve prints an --api-key given to vLLM",
        (
            (
                "runtime/serve.py",
                "        for i, text in self._masked().items():",
                "        for i, text in {}.items():",
            ),
        ),
        ("tests/test_secrets.py::test_an_api_key_given_to_serve_reaches_vllm_but_no_output",),
    ),
    Break(
        "serve masks --api-key in vLLM's own argv too",
        (
            (
                "runtime/serve.py",
                '    argv = [sys.executable, "-m", API_SERVER, *serve_argv(recipe), *(serving_args or [])]',
                "    argv = [sys.executable, \"-m\", API_SERVER, *serve_argv(recipe), *[a if 'api' not in a and 'PLANTED' not in a and 'hf_' not in a else '***' for a in (serving_args or [])]]",
            ),
        ),
        ("tests/test_secrets.py::test_an_api_key_given_to_serve_reaches_vllm_but_no_output",),
    ),
    Break(
        "a traceback of ours bypasses the redacting stream",
        (
            (
                "neuronbuild/ui/console.py",
                "            traceback.print_exc()  # written here",
                "            raise  # written here",
            ),
        ),
        ("tests/test_secrets.py::test_a_traceback_of_ours_is_redacted_too",),
    ),
    Break(
        "any command prints the HF_TOKEN of its environment",
        (
            (
                "neuronbuild/ui/redact.py",
                "def redact(text: str) -> str:",
                "def redact(text: str) -> str:\n    import os\n\n    return text + os.environ.get('HF_TOKEN', '')\n\n\ndef _unused(text: str) -> str:",
            ),
        ),
        (
            "tests/runtime/test_node_config.py::test_a_local_model_missing_on_the_node_names_the_folder_and_workdir_not_the_hub",
        ),
    ),
    Break(
        "verify --json keeps a Statement binding another recipe as a sound entry",
        (
            (
                "neuronbuild/attest/inspect.py",
                "        elif unbound is not None:",
                "        elif unbound is not None and False:",
            ),
        ),
        (
            "tests/attest/test_bindings.py::test_verify_json_marks_the_entry_that_binds_another_recipe",
        ),
    ),
    Break(
        "a keyless identity's expires is ignored",
        (
            (
                "neuronbuild/attest/policy.py",
                "                    if void := finding.void_at(logged, now):",
                "                    if void := None:",
            ),
        ),
        (
            "tests/attest/test_keyless.py::test_revoking_an_identity_keeps_what_rekor_logged_before_it",
        ),
    ),
    Break(
        "a keyless identity's expires voids what was logged before it too",
        (
            (
                "neuronbuild/attest/keyless.py",
                "        if logged is not None and logged >= self.expires:",
                "        if logged is not None:",
            ),
        ),
        (
            "tests/attest/test_keyless.py::test_revoking_an_identity_keeps_what_rekor_logged_before_it",
        ),
    ),
    Break(
        "verify --json calls a keyless signature logged after its identity expired verified",
        (
            (
                "neuronbuild/attest/inspect.py",
                'entry["verified"] = signer, signer is not None and void is None',
                'entry["verified"] = signer, signer is not None',
            ),
        ),
        (
            "tests/attest/test_keyless.py::test_revoking_an_identity_keeps_what_rekor_logged_before_it",
        ),
    ),
    Break(
        "serve skips the weights check",
        (("runtime/serve_checks.py", "    weights_as_built,\n", ""),),
        (
            "tests/runtime/test_serve_weights.py::test_a_node_whose_weights_differ_is_refused_in_one_line_naming_the_file",
        ),
    ),
    Break(
        "the weights record is trusted on size alone",
        (
            (
                "neuronbuild/node/weights.py",
                "known[:5] == stats[name]",
                "known[2] == stats[name][2]",
            ),
        ),
        (
            "tests/runtime/test_serve_weights.py::"
            "test_a_repeat_hashes_nothing_until_a_file_changes_even_with_its_size_and_mtime_kept",
        ),
    ),
    Break(
        "a seal records no weights",
        (
            (
                "neuronbuild/orchestrate/seal.py",
                'recorded_weights(recipe.model, recipe.engine_args.get("revision"), recipe.workdir)',
                "None",
            ),
        ),
        (
            "tests/runtime/test_serve_weights.py::test_a_node_with_the_builds_weights_serves_and_says_it_checked_them",
        ),
    ),
    Break(
        "a weight file on the node but not in the build is served",
        (
            (
                "neuronbuild/node/weights.py",
                "for name in sorted(set(want) | set(here))",
                "for name in sorted(want)",
            ),
        ),
        (
            "tests/runtime/test_serve_weights.py::test_a_weight_file_vllm_would_load_that_the_build_lacks_is_a_difference",
        ),
    ),
    Break(
        "probe compares tokens alone",
        (("neuronbuild/node/probe.py", "if not abs(x - y) <= record.tolerance", "if False"),),
        (
            "tests/runtime/test_probe.py::test_a_node_that_answers_otherwise_fails_and_writes_no_receipt",
        ),
    ),
    Break(
        "probe holds whatever the server answers",
        (("runtime/probe.py", "found = differences(wanted, answers)", "found = []"),),
        (
            "tests/runtime/test_probe.py::test_a_node_that_answers_otherwise_fails_and_writes_no_receipt",
        ),
    ),
    Break(
        "probe overlooks a new compile cache entry",
        (
            (
                "runtime/probe.py",
                "compiled_since(root, manifest, Path(folder), bookkeeping) if folder else []",
                "[]",
            ),
        ),
        ("tests/runtime/test_probe.py::test_a_server_that_compiled_since_it_started_fails",),
    ),
    Break(
        "probe overlooks an entry rewritten in place",
        (
            (
                "runtime/probe.py",
                "if not (check_image(root, manifest, digest) or laid_out(root, manifest, digest)):",
                "if False:",
            ),
        ),
        (
            "tests/runtime/test_probe.py::test_a_file_of_the_build_rewritten_since_it_was_laid_out_fails",
        ),
    ),
    Break(
        "probe ignores any new file inside an entry the build holds",
        (
            (
                "neuronbuild/node/probe.py",
                "rel.name in bookkeeping and str(rel.parent)",
                "str(rel.parent)",
            ),
        ),
        ("tests/runtime/test_probe.py::test_a_server_that_compiled_since_it_started_fails",),
    ),
    Break(
        "a lay-out stamp written before a reboot is trusted",
        (
            (
                "neuronbuild/node/materialize.py",
                '    if value.get("boot") != boot_id():\n        return None\n',
                "",
            ),
        ),
        (
            "tests/store/test_claims_node.py::"
            "test_a_node_crashed_at_every_step_of_a_fresh_prepare_serves_only_verified_bytes",
        ),
    ),
    Break(
        "a weights record written before a reboot is trusted",
        (
            (
                "neuronbuild/node/weights.py",
                'if value is None or value.get("boot") != boot_id():',
                "if value is None:",
            ),
        ),
        ("tests/runtime/test_serve_weights.py::test_the_record_of_another_boot_is_not_trusted",),
    ),
    Break(
        "weights are every safetensors file, the index ignored",
        (
            (
                "neuronbuild/node/weights.py",
                "return [n for n in safetensors if n in named]",
                "return safetensors",
            ),
        ),
        ("tests/runtime/test_serve_weights.py::test_files_vllm_would_not_load_are_not_weights",),
    ),
    Break(
        "a weight file changing while hashed is recorded",
        (("neuronbuild/node/weights.py", "    if moved:\n", "    if False:\n"),),
        (
            "tests/runtime/test_serve_weights.py::"
            "test_a_file_that_changes_while_it_is_hashed_is_refused_not_recorded",
        ),
    ),
    Break(
        "probe takes any prompts a record holds",
        (
            (
                "neuronbuild/node/probe.py",
                "if tuple(a.prompt for a in parsed) != PROMPTS:",
                "if False:",
            ),
        ),
        (
            "tests/runtime/test_probe.py::test_a_hostile_probe_record_is_refused_and_nothing_is_asked_or_written",
        ),
    ),
    Break(
        "probe --record overwrites CI's answers",
        (
            (
                "neuronbuild/store/cas.py",
                "        if replace:\n            self.backend.put(path, data)",
                "        if True:\n            self.backend.put(path, data)",
            ),
        ),
        ("tests/runtime/test_probe.py::test_answers_recorded_before_are_kept_unless_forced",),
    ),
    Break(
        "probe takes the engine's bookkeeping inside a loaded entry for a compile",
        (
            (
                "neuronbuild/node/probe.py",
                "and not (rel.name in bookkeeping and str(rel.parent) in entries)",
                "",
            ),
        ),
        ("tests/runtime/test_probe.py::test_a_server_that_compiled_since_it_started_fails",),
    ),
    Break(
        "the CPU compile skips the request with logprobs",
        (
            (
                "neuronbuild/engines/vllm_cpu/compile_worker.py",
                "if answers_with_logprobs(engine_args):",
                "if False:",
            ),
        ),
        ("tests/engines/test_cpu_warmup.py",),
    ),
    Break(
        "serve's fetch keeps an fsync per blob",
        (("neuronbuild/store/tiered.py", "self.local.backend.durable_blobs = False", "pass"),),
        (
            "tests/store/test_claims_node.py::test_serve_fetches_without_an_fsync_per_blob_and_pull_with_one",
        ),
    ),
    Break(
        "push leaves CI's answers behind",
        (("neuronbuild/store/transfer.py", "    notes += copy_probe(src, dst, digest)\n", ""),),
        ("tests/runtime/test_probe.py::test_push_carries_ci_s_answers_to_the_store_nodes_read",),
    ),
    Break(
        "a blob copied in the kernel is kept unhashed",
        (
            (
                "neuronbuild/store/cas.py",
                "                        copy_verified(kept, None, file.digest, file.size, url)\n",
                "                        pass\n",
            ),
        ),
        (
            "tests/store/test_claims_cas.py::test_a_blob_whose_bytes_do_not_match_never_reaches_its_destination",
        ),
    ),
    Break(
        "a blob of another size is copied in the kernel",
        (
            (
                "neuronbuild/store/cas.py",
                "    if found != file.size:\n        raise DigestMismatch(",
                "    if False:\n        raise DigestMismatch(",
            ),
        ),
        ("tests/store/test_hostile.py::test_a_blob_longer_than_declared_is_read_no_further",),
    ),
    Break(
        "a receipt says the weights were as built whatever the node holds",
        (
            (
                "runtime/probe.py",
                "checked = None if weights is None else not weights[1]",
                "checked = None if weights is None else True",
            ),
        ),
        (
            "tests/runtime/test_probe.py::test_a_receipt_says_whether_the_nodes_weights_are_the_builds",
        ),
    ),
    Break(
        "a node serves a build of an index whose labels it does not fit",
        (
            (
                "runtime/pick.py",
                "    exact = [e for e, found in rows if not found]",
                "    exact = [e for e, found in rows if len(found) < 9][:1]",
            ),
        ),
        (
            f"{INDEX}::test_each_node_picks_its_own_build_and_says_which_and_why",
            f"{INDEX}::test_a_node_no_build_fits_gets_one_table_of_every_build_and_exit_2",
            "tests/runtime/test_pick_releases.py::test_a_node_of_each_release_picks_its_build_of_one_ref_and_another_gets_the_table",
        ),
    ),
    Break(
        "a node reads only the engine's machine check, not its installed versions",
        (
            (
                "runtime/pick.py",
                "        if not pin_matches(pin, installed := installed_version(dist))",
                "        if False",
            ),
        ),
        (
            "tests/runtime/test_pick_releases.py::test_a_node_of_each_release_picks_its_build_of_one_ref_and_another_gets_the_table",
        ),
    ),
    Break(
        "allowed differences pick one of several builds they cover",
        (("runtime/pick.py", "    if len(fitting) == 1:", "    if fitting:"),),
        (f"{INDEX}::test_allowed_differences_pick_the_one_build_they_cover_and_never_choose",),
    ),
    Break(
        "two builds one node could serve both are sealed under one ref",
        (
            (
                "neuronbuild/orchestrate/family.py",
                "    if _machine(a) != _machine(b):",
                "    if True:",
            ),
        ),
        (f"{INDEX}::test_builds_one_node_could_serve_both_are_refused_at_seal",),
    ),
    Break(
        "recipes of one name that differ in more than their labels are one family",
        (
            (
                "neuronbuild/orchestrate/family.py",
                "        (k for k in sorted((set(mine) | set(theirs)) - free) if mine.get(k) != theirs.get(k)),",
                "        (k for k in () if mine.get(k) != theirs.get(k)),",
            ),
        ),
        (
            f"{INDEX}::test_recipes_of_one_name_that_differ_in_more_than_labels_are_refused",
            f"{INDEX}::test_index_refuses_a_build_of_another_recipe_beside_the_refs",
        ),
    ),
    Break(
        "--index drops the builds the ref named",
        (
            (
                "neuronbuild/orchestrate/family.py",
                "        for e in (current.entries if current is not None else ())",
                "        for e in ()",
            ),
        ),
        (f"{INDEX}::test_index_adds_a_build_beside_the_refs_and_a_rebuild_replaces_its_own",),
    ),
    Break(
        "a rebuild under --index is added beside its old entry",
        (
            (
                "neuronbuild/orchestrate/family.py",
                "        if all(e.labels != n.labels for n in entries)",
                "        if True",
            ),
        ),
        (f"{INDEX}::test_index_adds_a_build_beside_the_refs_and_a_rebuild_replaces_its_own",),
    ),
    Break(
        "a family's ref moves to each recipe's own manifest",
        (
            (
                "neuronbuild/orchestrate/seal.py",
                "if len(e) == 1 and not index}",
                "if len(e) >= 1 and not index}",
            ),
        ),
        (f"{INDEX}::test_recipes_of_one_name_seal_one_index_and_move_one_ref",),
    ),
    Break(
        "gc sweeps the builds of an index a ref names",
        (("neuronbuild/store/gc.py", "    live = with_entries(store, live)\n", ""),),
        (f"{INDEX}::test_gc_keeps_every_build_of_a_live_index_and_sweeps_a_dead_one",),
    ),
    Break(
        "gc keeps an index no ref reaches",
        (("neuronbuild/store/gc.py", "    doomed += doomed_indexes", "    doomed += []"),),
        (f"{INDEX}::test_gc_keeps_every_build_of_a_live_index_and_sweeps_a_dead_one",),
    ),
    Break(
        "gc deletes the builds of an index a racing move is about to name",
        (
            (
                "neuronbuild/store/gc.py",
                "    return with_entries(store, named | set(store.refs().values()))",
                "    return named | set(store.refs().values())",
            ),
        ),
        (f"{INDEX}::test_gc_spares_the_builds_of_an_index_a_racing_move_is_about_to_name",),
    ),
    Break(
        "a ref moves to an index whose build gc is sweeping",
        ((CAS, "            if self._condemned(entry, intent):", "            if False:"),),
        (f"{INDEX}::test_a_ref_does_not_move_to_an_index_whose_build_gc_is_sweeping",),
    ),
    Break(
        "push copies an index without its builds",
        (
            (
                "neuronbuild/store/transfer.py",
                "            for entry in index.manifests()\n",
                "            for entry in index.manifests()[:0]\n",
            ),
        ),
        (f"{INDEX}::test_ls_verify_push_pull_and_tag_handle_an_index_as_a_manifest",),
    ),
    Break(
        "verify of an index checks one of its builds",
        (
            (
                "neuronbuild/cli/store.py",
                "    builds = store.manifests_of(found.digest)  # an index: each entry's build",
                "    builds = store.manifests_of(found.digest)[:1]",
            ),
        ),
        (f"{INDEX}::test_ls_verify_push_pull_and_tag_handle_an_index_as_a_manifest",),
    ),
    Break(
        "doctor reads an index as a manifest",
        (
            (
                "neuronbuild/orchestrate/doctor.py",
                "        latest = store.build_for(latest, machine_labels(plan.units[0].key.factors))\n",
                "",
            ),
        ),
        (f"{INDEX}::test_doctor_compares_a_recipe_with_its_own_build_of_the_index",),
    ),
    Break(
        "an index accepts a manifest listed twice",
        (
            (
                "neuronbuild/store/index.py",
                "        if len({e.manifest for e in parsed}) != len(parsed):",
                "        if False:",
            ),
        ),
        (f"{INDEX}::test_an_index_parses_only_as_written_by_seal",),
    ),
    Break(
        "an image index names one platform for every build",
        (
            (
                "neuronbuild/image/build.py",
                '"platform": {"os": "linux", "architecture": built.architecture},',
                '"platform": {"os": "linux", "architecture": "amd64"},',
            ),
        ),
        (
            "tests/image/test_image_index.py::test_an_index_becomes_an_image_index_with_one_image_per_platform",
        ),
    ),
    Break(
        "a family seals the builds that compiled when one failed",
        (
            (
                "neuronbuild/orchestrate/compile.py",
                "run.recipe.name not in failed]",
                "not run.report.failed]",
            ),
        ),
        (
            "tests/orchestrate/test_family_compile.py::test_a_failed_build_of_a_family_seals_none_of_it",
        ),
    ),
    Break(
        "pins one installation satisfies are told apart by their spelling",
        (
            (
                "neuronbuild/orchestrate/family.py",
                "        a, b = Version(pin), Version(other)\n",
                "        a, b = Version(pin), Version(other)\n        return pin == other\n",
            ),
        ),
        (f"{INDEX}::test_pins_one_installation_satisfies_are_not_told_apart",),
    ),
    Break(
        "serve of a recipe file lets the node pick another build of its index",
        (
            (
                "runtime/serve.py",
                "    if index is not None and recipe_file is not None:",
                "    if index is not None and recipe_file is None and False:",
            ),
        ),
        (f"{INDEX}::test_serve_of_a_recipe_file_serves_its_own_build_of_the_index",),
    ),
    Break(
        "an index no reader takes is written",
        (
            (
                "neuronbuild/store/cas.py",
                '            Index.from_bytes(data, f"index of {index.name}")\n',
                "            pass\n",
            ),
        ),
        (f"{INDEX}::test_a_label_no_reader_takes_is_never_written",),
    ),
    Break(
        "an index in another order than seal's is accepted",
        (
            (
                "neuronbuild/store/index.py",
                "        if [e.manifest for e in parsed] != sorted(e.manifest for e in parsed):",
                "        if False:",
            ),
        ),
        (f"{INDEX}::test_an_index_parses_only_as_written_by_seal",),
    ),
    Break(
        "an image index of two builds of one machine is pushed",
        (("neuronbuild/image/build.py", "        if arch in seen:", "        if arch in ():"),),
        (
            "tests/image/test_image_index.py::test_builds_of_one_machine_are_refused_as_an_image_index",
        ),
    ),
]


def apply(edits: tuple[tuple[str, str, str], ...]) -> dict[Path, str]:
    saved: dict[Path, str] = {}
    for name, old, new in edits:
        path = REPO / name
        saved.setdefault(path, path.read_text())
        current = path.read_text()
        if old not in current:
            restore(saved)
            raise SystemExit(f"{name}: the text to break is not there: {old[:60]!r}")
        path.write_text(current.replace(old, new))
    return saved


def restore(saved: dict[Path, str]) -> None:
    for path, text in saved.items():
        path.write_text(text)


def run_tests(tests: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """The named tests (real vLLM left out), in a process of their own, from the checkout."""
    argv = ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not vllm", *tests]
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True)


def main(names: list[str]) -> int:
    """Exit 0 when every selected break is killed, 1 when one survives, 2 when the named tests
    fail on the unbroken product (then a "kill" would prove nothing)."""
    chosen = [b for b in BREAKS if not names or any(n in b.name for n in names)]
    baseline = run_tests(tuple(sorted({t for b in chosen for t in b.tests})))
    if baseline.returncode != 0:
        print(baseline.stdout[-3000:], baseline.stderr[-2000:])
        print("the named tests fail without any break: fix them before trusting a kill")
        return 2
    # A SIGTERM (a CI job's timeout) unwinds through ``finally``: the product is restored.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    survived = []
    for brk in chosen:
        saved = apply(brk.edits)
        try:
            run = run_tests(brk.tests)
        finally:
            restore(saved)
        killed = run.returncode == 1
        print(f"{'killed  ' if killed else 'SURVIVED'} {brk.name} (exit {run.returncode})")
        if not killed:
            survived.append(brk.name)
            print(run.stdout[-2000:], run.stderr[-2000:])
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
