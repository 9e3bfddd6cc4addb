"""The demo (``make run``): a tiny model built here, compiled, served from the store, asked one
question; and the vLLM server harness it shares with the tests and benchmarks."""
