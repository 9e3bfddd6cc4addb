"""The store wing: everything that reads, writes, moves, checks or sweeps stored objects.

- :mod:`.layout`: the kinds of objects and every path (nothing else spells one);
- :mod:`.records`: the typed records (file, unit record, manifest, ref move) and their parsing;
- :mod:`.schemes`: the one door to a backend: scheme -> factory -> install hint -> atomic writes
  (a new transport is one module and one row; ``tests/lib/locked_memory.py`` shows one);
- :mod:`.backends`: atomic primitives per file system; imported by nothing outside this package;
- :mod:`.cas`: :class:`~.cas.Store`, one store at one URL;
- :mod:`.names`: what a user types for a manifest (a ref, a bare name, a digest prefix) resolved;
- :mod:`.tiered`: a local folder in front of a remote store;
- :mod:`.transfer`, :mod:`.verify`, :mod:`.gc`: copy, check, sweep;
- :mod:`.oci`: the layout's paths on an OCI registry repository.

The bytes travel through :mod:`neuronbuild.transports` (the registry client, obstore's S3
reader, ranged reads, the retry policy); a folder laid out for vLLM is :mod:`neuronbuild.node`'s.

This package's ``__init__`` imports nothing. Canonical JSON and sha256 are the kernel's
(:mod:`neuronbuild.digest`), so unit keys never load the store.
"""
