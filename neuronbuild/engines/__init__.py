"""Compile backends. Nothing outside this package asks which engine it holds.

- :mod:`.registry`: every engine by name (:func:`~.registry.engine_for` a recipe,
  :func:`~.registry.get_engine` by name), read lazily from one table;
- :mod:`.base`: the :class:`~.base.Engine` protocol each engine implements;
- :mod:`.vllm_cpu`, :mod:`.neuron`: one package per engine, its plan rules and serve half in
  ``engine``, its compile half (with the shared :mod:`.compiler`) loaded only to compile.

This package's ``__init__`` imports nothing.
"""
