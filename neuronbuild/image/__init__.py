"""Node images: a manifest's lay-out as an OCI image, pushed to a registry, that Kubernetes mounts
read-only as an image volume (``neuronbuild image``; ``serve`` checks such a mount by its stamp).

This file intentionally imports no submodule: the registry client (ORAS) loads only for
``neuronbuild image``.
"""
