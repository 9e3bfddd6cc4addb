"""Compile backends. Nothing outside this package asks which engine it holds.

- :mod:`.registry`: every engine by name (:func:`~.registry.engine_for` a recipe,
  :func:`~.registry.get_engine` by name), read lazily from one table;
- :mod:`.base`: the :class:`~.base.Engine` protocol each engine implements;
- :mod:`.cpu`, :mod:`.neuron`: the engines' plan rules and serve halves; their compile halves
  (:mod:`.cpu_compile`, :mod:`.neuron_compile`, :mod:`.compiler`) load only to compile.

This package's ``__init__`` imports nothing.
"""
