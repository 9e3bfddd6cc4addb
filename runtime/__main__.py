from neuronbuild.ui.console import run

from .cli import serve

run(serve)
