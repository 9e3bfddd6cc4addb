"""The scheme table is the only door to a store backend (issue 40 item 2): a store URL's scheme
picks its row, a row whose module is missing says what to install, and no product module builds
a backend but the rows' factories."""

from __future__ import annotations

import ast

import pytest

from neuronbuild.errors import UserError
from neuronbuild.store.cas import Store
from neuronbuild.transports import schemes
from tests.conftest import REPO

BACKENDS = {"FolderBackend", "ObjectBackend", "RegistryBackend", "LastWriterWinsBackend"}


@pytest.mark.parametrize(
    ("url", "scheme", "row"),
    [
        ("/srv/store", "", schemes.FOLDER),
        ("file:///srv/store", "file", schemes.FOLDER),
        ("s3://bucket/prefix", "s3", schemes.S3),
        ("OCI://host/repository", "OCI", schemes.OTHER),
        ("oci+http://127.0.0.1:5000/ml/store", "oci+http", schemes.REGISTRY),
        ("memory://store", "memory", schemes.OTHER),
        ("simplecache::s3://bucket", "simplecache::s3", schemes.OTHER),
    ],
)
def test_a_store_url_opens_through_its_schemes_row(
    url: str, scheme: str, row: schemes.SchemeRow
) -> None:
    assert (schemes.scheme_of(url), schemes.row_of(url)) == (scheme, row)


def test_a_row_whose_module_is_missing_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    row = schemes.SchemeRow("neuronbuild_no_such_transport:open", "pip install no-such", True)
    monkeypatch.setitem(schemes.SCHEMES, "nosuch", row)
    with pytest.raises(UserError) as caught:
        Store("nosuch://bucket/store")
    assert str(caught.value).startswith("--cache 'nosuch://bucket/store': No module named ")
    assert str(caught.value).endswith("; pip install no-such")
    with pytest.raises(UserError, match=r"^--cache 'unknown://x': Protocol not known: unknown"):
        Store("unknown://x")


def test_only_the_rows_factories_build_a_backend() -> None:
    builders = {}
    for path in sorted((REPO / "neuronbuild").rglob("*.py")) + sorted(
        (REPO / "runtime").rglob("*.py")
    ):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                calls = {
                    c.func.id
                    for c in ast.walk(node)
                    if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                }
                if calls & BACKENDS:
                    builders[f"{path.relative_to(REPO)}:{node.name}"] = sorted(calls & BACKENDS)
    assert builders == {
        "neuronbuild/transports/backends.py:open_folder": ["FolderBackend"],
        "neuronbuild/transports/backends.py:open_object": ["ObjectBackend"],
        "neuronbuild/transports/backends.py:open_other": ["LastWriterWinsBackend"],
        "neuronbuild/store/oci.py:open_registry": ["RegistryBackend"],
    }
    factories = {row.factory for row in [*schemes.SCHEMES.values(), schemes.OTHER]}
    assert factories == {
        "neuronbuild.transports.backends:open_folder",
        "neuronbuild.transports.backends:open_object",
        "neuronbuild.transports.backends:open_other",
        "neuronbuild.store.oci:open_registry",
    }
