"""Transports: how bytes reach a store's backend, knowing keys, never the store's layout.

- :mod:`.retry`: the one retry policy (:func:`~.retry.retried`, on tenacity): which faults are
  retried, how long to wait, and the line each retry prints;
- :mod:`.s3_fast`: blob GETs on S3 through obstore;
- :mod:`.ranged`: concurrent ranged reads of one large object, handed back as one stream;
- :mod:`.oci_registry`: one OCI registry repository over the distribution API.

Nothing here imports :mod:`neuronbuild.store` (a test checks it). This package's ``__init__``
imports nothing.
"""
