"""The store wing: everything that reads, writes, moves, checks or sweeps stored objects.

- :mod:`.layout`: the kinds of objects and every path (nothing else spells one);
- :mod:`.records`: the typed records (file, unit record, manifest, ref move) and their parsing;
- :mod:`.cas`: :class:`~.cas.Store`, one store at one URL;
- :mod:`.names`: what a user types for a manifest (a ref, a bare name, a digest prefix) resolved;
- :mod:`.tiered`: a local folder in front of a remote store;
- :mod:`.transfer`, :mod:`.gc`: copy, sweep;
- :mod:`.oci`: the layout's paths on an OCI registry repository.

The bytes travel through :mod:`neuronbuild.transports` (its scheme table, the one door to a
backend; the backends' atomic primitives; the registry client, obstore's S3 reader, ranged reads,
the retry policy), which the store hands its layout's temporaries and locks; a folder laid out
for vLLM is :mod:`neuronbuild.node`'s.

This package's ``__init__`` imports nothing. Canonical JSON and sha256 are the kernel's
(:mod:`neuronbuild.digest`), so unit keys never load the store.
"""
