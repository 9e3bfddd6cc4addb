"""neuronbuild_runtime: the thin runtime of inference nodes (fetch, verify, materialise, exec vLLM).

It may import neuronbuild's store, manifest and env modules and the engines' serve half, never the
scheduler or an engine's compile path (``tests/runtime/test_import_graph.py`` checks it).
"""
