"""Signed build attestations of sealed manifests: in-toto Statements (v1) with a SLSA v1
provenance predicate, in DSSE envelopes signed by a key file or an AWS KMS key, or in Sigstore
bundles signed keyless as a CI job's OIDC identity, and checked offline against a node's trust
policy. This file intentionally imports nothing (the runtime imports only the reading half)."""
