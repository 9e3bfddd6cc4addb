"""neuronbuild: compile vLLM's graphs ahead of time, store them content-addressed, serve them."""

__version__ = "0.1.0"
