"""A test double of vLLM + vLLM-Neuron (Neuron SDK 2.32.0) for the neuron engine's tests.

How it is reached, and why: the real compile path is ``python -m
neuronbuild.engines.neuron.compile_worker`` running ``vllm.entrypoints.openai.api_server`` with the
recipe's command line (``vllm.LLM`` stays for the offline API), after which vLLM loads vLLM-Neuron
through its ``vllm.platform_plugins`` entry point; serve runs
``python -m vllm.entrypoints.openai.api_server``; ``compile`` reads the installed versions with
``importlib.metadata``. The Neuron SDK cannot be installed here (its PyPI names are placeholders)
and vLLM's CPU build is not the vLLM 0.24.0 the SDK pairs with, so ``site/`` is a test-only
installation of the whole set, put first on ``PYTHONPATH`` (and ``sys.path`` in the test process):
``vllm`` 0.24.0 (only what the product calls: ``LLM``, the API server module, and vLLM's platform
plugin loading by entry point), ``vllm-neuron`` 0.24.0.1.1.0 registered through the same
``vllm.platform_plugins`` entry point as the real plugin, and ``*.dist-info`` of neuronx-cc, nki
and libtorch-neuronx-lite at the versions SDK 2.32.0's wheels report, PEP 440 local labels
included (``2.27.5334.0+f702b353``, ``0.6.0+31049202112.g85070674``, ``2.11.0.1.0.1284+f49d8626``:
fidelity row B12), each with a ``RECORD`` as pip writes one (hashed files, an unhashed ``.pyc``, a
``../../../bin`` script, the dist-info's own files). The seam is Python's import system and
distribution metadata, which the real path passes through unchanged: no switch in the product
knows about the double.

The double follows reference/vllm-neuron-contract.md: it plans the graphs of the engine arguments
itself (its own code, not neuronbuild's, from the plugin's rules: each function names the one it
follows), resolves the configuration as ``NeuronPlatform.check_and_update_config`` does (the O-level
from ``sys.argv``, row B10; a vision config with default buckets for any model whose ``config.json``
has a ``vision_config``, rows D13-D15, read from the model folder or the Hugging Face cache),
honours the phase skip switches with the worker's coupling (vision only with prefill or for an
``mm_encoder_only`` engine, none for a KV consumer, row A9), KV roles and pooling (``runner``,
``convert`` or the architecture's suffix),
writes one entry per graph in the real layout (``graph.hlo``, ``graph_<key>.neff``,
``.artifact_metadata_v0.json``, ``.compilation_complete`` last, plus a lock file, a temporary file
and a rank capture folder that must not be harvested) under a key derived from the graph's shapes
and what enters vLLM-Neuron's real key (compiler arguments, versions, target, KV block count and
its inputs, tensor parallelism, keyed variables; never the bucket lists), skips complete entries
(a hit), and at serve fails on a local miss like ``VLLM_NEURON_DISABLE_WARMUP_COMPILE``.

Test-only variables: ``NEURON_DOUBLE_RECORD`` (a file; one line per graph compiled),
``NEURON_DOUBLE_HELPERS`` (a file; the pid of the engine helper process each run leaves behind),
``NEURON_DOUBLE_GRAPH_SECONDS`` (seconds one graph's "compile" takes, for bench/),
``NEURON_DOUBLE_DEVICE`` (the Neuron target this "node" has, for serve), ``NEURON_DOUBLE_FAIL``
(fail like neuronx-cc: ``exit70-once:<state file>``, ``ncc:<prefill tokens>``,
``oom-above:<workers>``, ``oom-trace-above:<trace workers>``, ``hang``),
``NEURON_DOUBLE_NKI_INTERMEDIATE_CACHE`` (where NKI kernel binaries go, ``/var/tmp/...`` on a real
host; unset: the graphs call no NKI kernel).
"""

from pathlib import Path

SITE = Path(__file__).resolve().parent / "site"
"""The folder to put first on ``PYTHONPATH`` and ``sys.path``."""
