"""neuronbuild: compile vLLM's graphs ahead of time, store them content-addressed, serve them."""

__version__ = "0.1.0"

# Snapshot the user's environment before anything can import torch (which sets variables).
from neuronbuild import start_env as _start_env  # noqa: F401
