"""Compile backends. Nothing outside this package asks which engine it holds.

- :mod:`.registry`: every engine by name (:func:`~.registry.engine_for` a recipe,
  :func:`~.registry.get_engine` by name), read lazily from one table whose row also names the
  engine's targets and its own recipe keys (``cpu_isa``): a third engine is one package and one
  row (``tests/lib/toy_engine.py`` shows one, run by ``tests/engines/test_every_engine.py``);
- :mod:`.base`: the :class:`~.base.Engine` protocol each engine implements;
- :mod:`.vllm_cpu`, :mod:`.neuron`: one package per engine, its plan rules and serve half in
  ``engine``, its compile half (with the shared :mod:`.compiler`) loaded only to compile.

This package's ``__init__`` imports nothing.
"""
