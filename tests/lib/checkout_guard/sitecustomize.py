"""Loaded by every Python process the tests start (``PYTHONPATH``): records each read under the
checkout's ``build/`` in ``$NEURONBUILD_TEST_BUILD_READS`` (see ``tests/lib/checkout.py``, loaded
by its path so that nothing of the tests' package is imported)."""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "_neuronbuild_checkout_guard", os.path.join(os.path.dirname(__file__), "..", "checkout.py")
)
if _spec is not None and _spec.loader is not None:
    _guard = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_guard)
    _guard.watch_subprocess()
