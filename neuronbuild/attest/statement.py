"""The attestation's payload: an in-toto Statement (v1) over one manifest, with a SLSA v1
provenance predicate describing how it was built.

Spec sources: in-toto Attestation Framework v1 (github.com/in-toto/attestation, ``spec/v1/
statement.md``: ``_type``, ``subject`` as ResourceDescriptors with a ``digest`` map,
``predicateType``, ``predicate``) and SLSA provenance v1 (slsa.dev/spec/v1.0/provenance:
``buildDefinition`` {``buildType``, ``externalParameters``, ``internalParameters``,
``resolvedDependencies``} and ``runDetails`` {``builder.id``, ``metadata``}).
"""

from __future__ import annotations

import calendar
import time
from typing import Any

from neuronbuild import __version__
from neuronbuild.attest.builder import Builder
from neuronbuild.digest import canonical_json, check_digest, hex_of, sha256_digest
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.store.records import Manifest

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://neuronbuild.dev/build/v1"
"""The ``buildType`` of a neuronbuild compile: its ``externalParameters`` hold the canonical
recipe and its digest, its ``internalParameters`` the toolchain as installed and every unit key."""


def provenance(
    manifest: Manifest, builder: Builder, finished: float | None = None
) -> dict[str, Any]:
    """The SLSA v1 provenance predicate of ``manifest``: its canonical recipe and that recipe's
    digest (``sha256:`` of its canonical JSON), the toolchain its units were built with (the
    versions installed where each unit compiled, which ``compile`` held equal to the recipe's
    pins), every unit key in manifest order, and ``builder`` with its run. ``finished``: when
    (seconds since the epoch; default now), as RFC 3339 UTC ``metadata.finishedOn``."""
    toolchain: dict[str, str] = {}
    for unit in manifest.units:
        toolchain.update(unit.toolchain)
    metadata: dict[str, Any] = {
        "finishedOn": iso_time(time.time() if finished is None else finished)
    }
    if builder.run is not None:
        metadata["invocationId"] = builder.run
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "recipe": manifest.recipe,
                "recipeDigest": sha256_digest(canonical_json(manifest.recipe)),
            },
            "internalParameters": {
                "toolchain": dict(sorted(toolchain.items())),
                "units": [unit.key for unit in manifest.units],
            },
            "resolvedDependencies": [],
        },
        "runDetails": {
            "builder": {
                "id": builder.id,
                "version": {"neuronbuild": __version__, "ci": builder.system},
            },
            "metadata": metadata,
        },
    }


IMAGE_BUILD_TYPE = "https://neuronbuild.dev/node-image/v1"
"""The ``buildType`` of a node image (``neuronbuild image``): the build's provenance, with the
neuronbuild manifest it lays out as its one ``resolvedDependencies`` entry."""


def image_statement(
    manifest: Manifest, digest: str, image: str, name: str, builder: Builder
) -> dict[str, Any]:
    """The in-toto Statement v1 of a node image: its one subject is the image manifest
    (``{"name": "HOST/REPOSITORY", "digest": {"sha256": <image hex>}}``), as cosign's
    ``verify-attestation`` and sigstore policy-controller match an image by digest; its predicate
    is the build's :func:`provenance` under :data:`IMAGE_BUILD_TYPE`, naming the neuronbuild
    manifest ``digest`` the image lays out (``resolvedDependencies``)."""
    predicate = provenance(manifest, builder)
    definition = predicate["buildDefinition"]
    definition["buildType"] = IMAGE_BUILD_TYPE
    definition["resolvedDependencies"] = [
        {"name": manifest.name, "digest": {"sha256": hex_of(digest)}}
    ]
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": hex_of(image)}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def statement(manifest: Manifest, digest: str, builder: Builder) -> dict[str, Any]:
    """The in-toto Statement v1 whose one subject is the manifest ``digest``
    (``{"name": <recipe name>, "digest": {"sha256": <64 hex>}}``) and whose predicate is
    :func:`provenance`."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": manifest.name, "digest": {"sha256": hex_of(digest)}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": provenance(manifest, builder),
    }


def statement_subject(data: Any, what: str) -> tuple[str, str, dict[str, Any]]:
    """``(subject manifest digest, subject name, predicate)`` of a parsed Statement (the name
    ``""`` where the subject has none).

    Raises:
        StoreDataInvalid: not a Statement v1 of a SLSA v1 predicate, or not exactly one subject
            with a sha256 digest (``what`` names the attestation).
    """
    if not isinstance(data, dict) or data.get("_type") != STATEMENT_TYPE:
        found = data.get("_type") if isinstance(data, dict) else type(data).__name__
        raise StoreDataInvalid(f"{what}: not an in-toto Statement v1 ({ascii(found)[:60]})")
    if data.get("predicateType") != PREDICATE_TYPE:
        found = ascii(data.get("predicateType"))[:80]
        raise StoreDataInvalid(f"{what}: predicate type {found}, expected {PREDICATE_TYPE}")
    subjects, predicate = data.get("subject"), data.get("predicate")
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(subjects[0], dict):
        raise StoreDataInvalid(f"{what}: expected exactly one subject")
    digests = subjects[0].get("digest")
    if not isinstance(digests, dict) or not isinstance(digests.get("sha256"), str):
        raise StoreDataInvalid(f"{what}: its subject has no sha256 digest")
    if not isinstance(predicate, dict):
        raise StoreDataInvalid(f"{what}: its predicate is not an object")
    name = subjects[0].get("name")
    subject = check_digest("sha256:" + digests["sha256"], f"{what}: subject")
    return subject, name if isinstance(name, str) else "", predicate


def iso_time(seconds: float) -> str:
    """``seconds`` since the epoch as RFC 3339 UTC to the second (``metadata.finishedOn``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def signed_time(predicate: dict[str, Any]) -> float | None:
    """When a verified Statement says it was made (seconds since the epoch): its predicate's
    ``runDetails.metadata.finishedOn``, which ``sign`` and ``seal`` set when they sign (so a
    build signed again is newer). None where it states none or not as :func:`iso_time` does.
    The signer's own clock: trusted as far as its key is."""
    details = predicate.get("runDetails")
    metadata = details.get("metadata") if isinstance(details, dict) else None
    value = metadata.get("finishedOn") if isinstance(metadata, dict) else None
    if not isinstance(value, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def binding_problem(
    name: str, predicate: dict[str, Any], ref: str, manifest: Manifest
) -> str | None:
    """None when a verified Statement binds ``manifest`` to ``ref`` (``<name>/<tag>``); else
    what it does instead, for a refusal (``a signature by X <this>``).

    A signature over a manifest binds it to one recipe name: the Statement's subject ``name``
    (:func:`statement`), which must be the ref's name and the name of the recipe its predicate
    holds; and the predicate must describe the manifest it names: the same canonical recipe
    (``recipeDigest`` its digest), unit keys in order and toolchain. Without this, a key that
    signs two recipes (one CI key for a fleet) lets a store writer point ``app/prod`` at
    ``other``'s build (TUF's mix-and-match attack), and a Statement could claim a recipe or
    target its manifest does not have (issue 43).
    """
    ref_name = ref.partition("/")[0]
    definition = predicate.get("buildDefinition")
    definition = definition if isinstance(definition, dict) else {}
    external = definition.get("externalParameters")
    external = external if isinstance(external, dict) else {}
    internal = definition.get("internalParameters")
    internal = internal if isinstance(internal, dict) else {}
    recipe = external.get("recipe")
    if not isinstance(recipe, dict):
        return "over a Statement whose predicate holds no recipe"
    if name != ref_name:
        return f"binding it to recipe {ascii(name)[:80]}, not {ref_name}"
    if recipe.get("name") != name:
        return f"over a Statement whose subject names {ascii(name)[:80]} but not its recipe"
    toolchain: dict[str, str] = {}
    for unit in manifest.units:
        toolchain.update(unit.toolchain)
    described = (
        canonical_json(recipe) == canonical_json(manifest.recipe)
        and external.get("recipeDigest") == sha256_digest(canonical_json(recipe))
        and internal.get("units") == [unit.key for unit in manifest.units]
        and internal.get("toolchain") == dict(sorted(toolchain.items()))
    )
    if manifest.name != name or not described:
        return "over a Statement that does not describe it (its recipe, units or toolchain differ)"
    return None
