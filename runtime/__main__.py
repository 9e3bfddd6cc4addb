from neuronbuild.console import run

from .cli import serve

run(serve)
