"""The Neuron engine: vLLM with the vLLM-Neuron plugin, compiled in CPU compile mode.

- :mod:`.engine`: the :class:`~.engine.NeuronEngine` (plan rules and serve half);
- :mod:`.buckets`, :mod:`.vision`, :mod:`.model`: the bucket, vision and model rules the plan
  applies, each quoting the plugin's check it mirrors;
- :mod:`.releases`: the Neuron SDK releases as rows of data; :mod:`.env`, :mod:`.nki`: the
  variables it reads and the NKI kernel caches that travel with the graphs;
- :mod:`.compile`, :mod:`.compile_worker`: the compile half (loaded only to compile);
- :mod:`.coverage`, :mod:`.node`: what a node checks before it serves; :mod:`.conformance`: the
  kit that settles on hardware what sources cannot.

This package's ``__init__`` imports nothing.
"""
