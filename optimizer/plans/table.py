"""What the solver sees: training plan templates and serving replica types on hardware groups
(``PlanTable``), and the exact dominance pruning of both."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TypeVar

from optimizer.perf.serve import ServePlan
from optimizer.perf.specs import TrainPlan
from optimizer.plans.groups import Group

V = TypeVar("V")


@dataclass(frozen=True)
class Candidate:
    """A plan template; the MIP picks one and its integer data-parallel degree."""

    key: str
    group: str
    plan: TrainPlan  # its dp is ep × dp_max, where throughput was evaluated
    dp_min: int  # in units of ep replicas (the MIP's dp; the data-parallel degree is ep × dp)
    dp_max: int
    replica_tokens_per_s: float  # per unit of ep replicas
    memory_gb: float  # per GPU at dp_min
    workload: str = ""  # which workload it trains, in a problem with several

    @property
    def gpus_per_replica(self) -> int:
        """GPUs per unit the MIP counts: TP × PP × CP, times EP for expert-parallel plans."""
        return self.plan.unit_gpus


@dataclass(frozen=True)
class ServeCandidate:
    """A serving replica type for one request class; the MIP picks how many of each."""

    key: str
    group: str
    demand: str  # request class name
    plan: ServePlan  # batch is the largest that meets the class's latency limits
    tokens_per_s: float  # output tokens/s of one replica
    ttft_s: float
    tpot_s: float
    memory_gb: float
    workload: str = ""  # which workload it serves, in a problem with several

    @property
    def gpus_per_replica(self) -> int:
        return self.plan.tp * self.plan.pp


@dataclass(frozen=True)
class PlanTable:
    """What the solver sees: candidates, the hardware groups they use, and what was dropped."""

    candidates: tuple[Candidate, ...]
    groups: dict[str, Group]
    dropped: Counter[str] = field(default_factory=Counter)  # reason class → templates
    gpu_reasons: dict[str, str] = field(default_factory=dict)  # gpu id → why it has no candidate
    enumerated: int = 0
    pruned: int = 0
    serving: tuple[ServeCandidate, ...] = ()


def dominates(a: Candidate, b: Candidate) -> bool:
    """True when every GPU count ``b`` can use, ``a`` can use too, at no less throughput.

    Same hardware group; ``a``'s GPUs per replica divide ``b``'s (k = ratio), so ``b`` at dp
    uses the GPUs of ``a`` at k·dp; ``a``'s dp range covers k·[b.dp_min, b.dp_max]; and ``a``
    yields at least as many tokens/s per GPU. Then any MIP solution using ``b`` is matched by
    one using ``a`` with the same GPUs, servers, network, cost and power, so pruning is exact.
    """
    if a.group != b.group or b.gpus_per_replica % a.gpus_per_replica:
        return False
    k = b.gpus_per_replica // a.gpus_per_replica
    return (a.dp_min <= k * b.dp_min and a.dp_max >= k * b.dp_max
            and a.replica_tokens_per_s / a.gpus_per_replica >= b.replica_tokens_per_s / b.gpus_per_replica)


def _scaled(by_mp: dict[int, V], mp: int, dp_min: int, dp_max: int) -> Iterator[tuple[V, int, int]]:
    """For each GPUs-per-replica ``a`` in ``by_mp`` that divides ``mp``: its entry and the dp
    range ``[dp_min, dp_max]`` of ``mp`` GPUs per replica scaled to replicas of ``a`` GPUs (k =
    mp / a of them to a replica), which a dominating candidate's range must contain."""
    for a_mp, entry in by_mp.items():
        if mp % a_mp == 0:
            k = mp // a_mp
            yield entry, k * dp_min, k * dp_max


def prune_dominated(candidates: list[Candidate]) -> tuple[list[Candidate], int]:
    """Keep only candidates no other candidate dominates (ties keep the first key).

    Candidates are visited by descending tokens/s per GPU, so every survivor already has at
    least the rate of the one being checked: what is left of ``dominates`` is divisibility of
    the GPUs per replica and containment of the scaled dp range, checked on plain tuples.
    """
    buckets: dict[str, list[Candidate]] = {}
    for c in candidates:
        buckets.setdefault(c.group, []).append(c)
    kept: list[Candidate] = []
    for bucket in buckets.values():
        bucket.sort(key=lambda c: (-c.replica_tokens_per_s / c.gpus_per_replica, c.gpus_per_replica,
                                   c.dp_min, -c.dp_max, c.key))
        ranges: dict[int, list[tuple[int, int]]] = {}  # GPUs per replica -> survivors' dp ranges
        for c in bucket:
            mp = c.gpus_per_replica
            if not any(a_lo <= lo and a_hi >= hi for spans, lo, hi in _scaled(ranges, mp, c.dp_min, c.dp_max)
                       for a_lo, a_hi in spans):
                ranges.setdefault(mp, []).append((c.dp_min, c.dp_max))
                kept.append(c)
    kept.sort(key=lambda c: c.key)
    return kept, len(candidates) - len(kept)


def serve_dominates(a: ServeCandidate, b: ServeCandidate) -> bool:
    """``a`` replaces ``b`` exactly: same group and class, a's GPUs per replica divide b's, and a
    yields at least as many tokens/s per GPU (k replicas of a use the GPUs of one of b)."""
    return (a.group == b.group and a.demand == b.demand and b.gpus_per_replica % a.gpus_per_replica == 0
            and a.tokens_per_s / a.gpus_per_replica >= b.tokens_per_s / b.gpus_per_replica)


def prune_serving(candidates: list[ServeCandidate]) -> tuple[list[ServeCandidate], int]:
    ordered = sorted(candidates, key=lambda c: (-c.tokens_per_s / c.gpus_per_replica, c.gpus_per_replica, c.key))
    kept: list[ServeCandidate] = []
    for c in ordered:
        if not any(serve_dominates(a, c) for a in kept):
            kept.append(c)
    kept.sort(key=lambda c: c.key)
    return kept, len(candidates) - len(kept)


def restrict(table: PlanTable, gpu: str) -> PlanTable:
    """The candidates on one GPU type only: what enumerating with just that GPU gives, since
    each GPU's groups, bounds and pruning are independent of the others'."""
    groups = {k: g for k, g in table.groups.items() if g.gpu == gpu}
    return replace(table, candidates=tuple(c for c in table.candidates if c.group in groups), groups=groups,
                   serving=tuple(r for r in table.serving if r.group in groups),
                   gpu_reasons={k: v for k, v in table.gpu_reasons.items() if k == gpu})

