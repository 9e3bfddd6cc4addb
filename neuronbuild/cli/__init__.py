"""The ``neuronbuild`` command line: parse arguments, call one function, print its result.

- :mod:`.main`: the command group, its global options (``--version``, ``-v``, ``-q``) and the
  console entry point;
- :mod:`.build`: recipes to sealed manifests (``validate``, ``plan``, ``compile``, ``seal``);
- :mod:`.store`: what a store holds (``verify``, ``push``, ``tag``, ``ls``, ``gc``, ``status``);
- :mod:`.diagnose`: why a unit misses, the host's instruction set (``doctor``, ``isa``);
- ``neuronbuild_runtime.cli``: the node side (``serve``, ``pull``).

This package's ``__init__`` imports nothing.
"""
