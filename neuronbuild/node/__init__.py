"""The node wing: a manifest laid out where vLLM looks, on the node that serves it.

- :mod:`.materialize`: lay a manifest's files out in a node-local ``VLLM_CACHE_ROOT``, with the
  stamp that lets a restart skip the work;
- :mod:`.image_stamp`: the stamp a node image carries, and the check that a (read-only) mount
  holds a manifest by it;
- :mod:`.mirrors`: the writable mirror of symlinks ``serve`` hands vLLM over a node image.

This package's ``__init__`` imports nothing.
"""
