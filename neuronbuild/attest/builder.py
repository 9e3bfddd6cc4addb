"""Who built a manifest: the builder identity and run of the CI system the command runs in.

Read from the variables each CI system documents (GitHub Actions, GitLab CI, Buildkite, AWS
CodeBuild); outside CI, a local builder. These are names of the build's identity, never keyed
into anything: a unit key never holds them (DESIGN.md, "What enters a unit key").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

LOCAL_BUILDER = "https://neuronbuild.dev/builders/local"
"""The builder id of a build outside any CI system this module knows."""


@dataclass(frozen=True)
class Builder:
    """A SLSA v1 ``runDetails.builder.id`` (``id``, a URI) and the run's
    ``metadata.invocationId`` (``run``, a URI; None outside CI), and the CI system's name
    (``system``: ``github``, ``gitlab``, ``buildkite``, ``codebuild`` or ``local``)."""

    system: str
    id: str
    run: str | None


def _github(env: Mapping[str, str]) -> Builder:
    # GitHub's documented default variables (docs.github.com, "Variables reference").
    server = env.get("GITHUB_SERVER_URL", "https://github.com")
    repo, run_id = env.get("GITHUB_REPOSITORY", ""), env.get("GITHUB_RUN_ID", "")
    workflow = env.get("GITHUB_WORKFLOW_REF") or repo
    attempt = env.get("GITHUB_RUN_ATTEMPT", "1")
    run = f"{server}/{repo}/actions/runs/{run_id}/attempts/{attempt}" if run_id else None
    return Builder("github", f"{server}/{workflow}", run)


def _gitlab(env: Mapping[str, str]) -> Builder:
    # GitLab's predefined variables (docs.gitlab.com, "Predefined CI/CD variables").
    project = env.get("CI_PROJECT_URL") or env.get("CI_SERVER_URL", "https://gitlab.com")
    return Builder("gitlab", project, env.get("CI_JOB_URL") or None)


def _buildkite(env: Mapping[str, str]) -> Builder:
    # Buildkite's agent environment (buildkite.com/docs, "Environment variables").
    org, pipeline = env.get("BUILDKITE_ORGANIZATION_SLUG", ""), env.get("BUILDKITE_PIPELINE_SLUG")
    ident = f"https://buildkite.com/{org}/{pipeline}" if pipeline else "https://buildkite.com"
    run = env.get("BUILDKITE_BUILD_URL") or None
    job = env.get("BUILDKITE_JOB_ID")
    return Builder("buildkite", ident, f"{run}#{job}" if run and job else run)


def _codebuild(env: Mapping[str, str]) -> Builder:
    # CodeBuild's build ARN: arn:aws:codebuild:<region>:<account>:build/<project>:<build id>.
    arn = env.get("CODEBUILD_BUILD_ARN", "")
    project = arn.rsplit(":", 1)[0].replace(":build/", ":project/", 1) if ":build/" in arn else arn
    return Builder("codebuild", project, arn or None)


def builder_from_env(env: Mapping[str, str]) -> Builder:
    """The builder of this run from ``env`` (the environment the command started with, see
    :func:`neuronbuild.start_env.environ`): the first CI system whose marker variable is set
    (``GITHUB_ACTIONS=true``, ``GITLAB_CI``, ``BUILDKITE=true``, ``CODEBUILD_BUILD_ARN``),
    else :data:`LOCAL_BUILDER` with no run. Never raises: a CI variable left unset gives a less
    specific id."""
    if env.get("GITHUB_ACTIONS") == "true":
        return _github(env)
    if env.get("GITLAB_CI"):
        return _gitlab(env)
    if env.get("BUILDKITE") == "true":
        return _buildkite(env)
    if env.get("CODEBUILD_BUILD_ARN"):
        return _codebuild(env)
    return Builder("local", LOCAL_BUILDER, None)
