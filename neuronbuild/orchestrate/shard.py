"""``--shard I/N``: which units of a compile run one of N machines builds.

Any engine that starts N copies of one command (a CI matrix, an AWS Batch array job, a Kubernetes
indexed Job) runs ``compile --shard I/N`` in each; no scheduler of ours is involved. The assignment
is a pure function of the units' keys and costs and of N: largest expected cost first, each unit to
the shard with the least work so far (lowest index on a tie), ties between units broken by key.
So every unit lands in exactly one shard for a given N on any machine, whatever order the shards
start or finish in, as long as each is given the same recipes (in any order) and keyed
environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from neuronbuild import envs, human
from neuronbuild.errors import EnvInvalid, UserError
from neuronbuild.orchestrate.costs import PlannedUnit, unit_costs
from neuronbuild.store.cas import Store

SHARD = re.compile(r"^(?P<index>\d+|auto)/(?P<count>\d+)$")

INDEX_VARIABLES = tuple(var.name for var in envs.SHARD_INDEXES)
"""Where ``--shard auto/N`` reads its index: Kubernetes indexed Jobs, then AWS Batch arrays (both
count from 0)."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (from 0) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str, environ: Mapping[str, str] | None = None) -> Shard:
    """``I/N`` (0 <= I < N) or ``auto/N``, whose index comes from ``$JOB_COMPLETION_INDEX``
    (Kubernetes) or ``$AWS_BATCH_JOB_ARRAY_INDEX`` (AWS Batch) in ``environ`` (default: this
    process's environment).

    Raises:
        UserError: another form, an index out of range, no index variable for ``auto`` or two
            that disagree; the message names the option or the variable and the fix.
    """
    match = SHARD.match(text.strip())
    if not match:
        raise UserError(f"--shard {text!r}: expected I/N (e.g. 0/4, counting from 0) or auto/N")
    count = int(match["count"])
    if count < 1:
        raise UserError(f"--shard {text!r}: the number of shards must be at least 1")
    if match["index"] != "auto":
        index = int(match["index"])
        if index >= count:
            raise UserError(
                f"--shard {text!r}: shards count from 0, so the index must be below {count}"
            )
        return Shard(index, count)
    try:
        found = {v.name: i for v in envs.SHARD_INDEXES if (i := v.get(environ)) is not None}
    except EnvInvalid as exc:
        raise EnvInvalid(f"--shard {text!r}: {exc}") from None
    if not found:
        raise UserError(
            f"--shard {text!r}: neither ${envs.JOB_COMPLETION_INDEX} (Kubernetes indexed Job) "
            f"nor ${envs.AWS_BATCH_JOB_ARRAY_INDEX} (AWS Batch array job) is set; pass the "
            f"index itself, e.g. --shard 0/{count}"
        )
    if len(set(found.values())) > 1:
        shown = ", ".join(f"${k}={v}" for k, v in found.items())
        raise UserError(f"--shard {text!r}: the index variables disagree ({shown})")
    name, value = next(iter(found.items()))
    if value >= count:
        raise UserError(
            f"--shard {text!r}: ${name}='{value}' is not an index from 0 to {count - 1}; "
            f"run {human.count(count, 'copy', 'copies')} of the job "
            f"(completions / array size {count})"
        )
    return Shard(value, count)


def assign_shards(costs: Mapping[str, float], count: int) -> dict[str, int]:
    """The shard (0 to ``count`` - 1) of every unit key in ``costs`` (expected seconds).

    Longest processing time first: units by decreasing cost (then by key), each given to the
    shard with the least total cost so far (then the lowest index). Within 4/3 of the best
    possible longest shard (Graham, 1969).
    """
    loads = [0.0] * count
    owner: dict[str, int] = {}
    for key in sorted(costs, key=lambda k: (-costs[k], k)):
        shard = min(range(count), key=lambda i: (loads[i], i))
        owner[key] = shard
        loads[shard] += costs[key]
    return owner


def assign_units(units: Sequence[PlannedUnit], store: Store | None, count: int) -> dict[str, int]:
    """The shard of every distinct unit of a run (the union of its recipes' units), from their
    costs (:func:`.costs.unit_costs`): what ``compile --shard I/N`` builds and what
    ``seal`` names as the owner of a missing unit.

    Raises:
        StoreError: the store's timings cannot be listed or read.
    """
    unique = list({u.key: u for u in units}.values())
    return assign_shards(unit_costs(unique, store), count)
