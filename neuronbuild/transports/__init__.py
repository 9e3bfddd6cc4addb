"""Transports: how bytes reach a store's backend, knowing keys, never the store's layout.

- :mod:`.schemes`: the one door to a backend: scheme -> factory -> install hint -> atomic writes
  (a new transport is one module and one row; ``tests/lib/locked_memory.py`` shows one);
- :mod:`.backends`: atomic primitives per fsspec file system (folders, S3, any other), and the
  policies around any backend (read-only, last-writer-wins); imported only by the store;
- :mod:`.retry`: the one retry policy (:func:`~.retry.retried`, on tenacity): which faults are
  retried, how long to wait, and the line each retry prints;
- :mod:`.s3_fast`: blob GETs on S3 through obstore;
- :mod:`.ranged`: concurrent ranged reads of one large object, handed back as one stream;
- :mod:`.oci_registry`: one OCI registry repository over the distribution API.

Nothing here imports :mod:`neuronbuild.store` (a test checks it): the scheme table names the
store's registry mapping (:mod:`neuronbuild.store.oci`) as a ``module:function`` string, read
when an ``oci://`` URL is opened. This package's ``__init__``
imports nothing.
"""
