"""How far the published measurements disagree among themselves, where the model cannot tell them apart.

Two rows with the same model, hardware, plan, stack and precision get the same prediction whatever
the parameters: whatever separates their measurements (a harness, a clock, a driver, a person's
settings) is beyond any model of the hardware and the engine. Such pairs measured by two sources
bound what out-of-source accuracy can reach; pairs measured twice by one source show the noise of
a benchmark against itself. Each pair's disagreement is the larger measurement over the smaller,
minus one: a pair 40 % apart leaves a model at least 18 % from one of the two (√1.4 − 1).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from optimizer.calibration.data import THROUGHPUT, percentile


@dataclass(frozen=True)
class Disagreement:
    """Pairs of indistinguishable rows and how far apart their throughputs were measured."""

    pairs: int
    rows: int  # distinct rows in the pairs
    median: float  # of larger / smaller − 1 over the pairs
    p90: float

    @classmethod
    def of(cls, ratios: list[float], rows: int) -> Disagreement:
        if not ratios:
            return cls(0, 0, float("nan"), float("nan"))
        gaps = [r - 1.0 for r in ratios]
        return cls(len(gaps), rows, statistics.median(gaps), percentile(gaps, 90))


@dataclass(frozen=True)
class Agreement:
    across_sources: Disagreement  # the two rows from different sources
    within_source: Disagreement  # both rows from one source (replicates)


def agreement(keys: Sequence[Hashable], sources: Sequence[str],
              measurements: Sequence[tuple[int, str, float]]) -> Agreement:
    """``keys[i]``: what the model sees of row ``i`` (rows with equal keys get equal predictions);
    ``sources[i]`` its source; ``measurements``: (row, metric, value). Only throughputs are paired,
    a metric with itself, as in the headline figures."""
    value: dict[tuple[int, str], float] = {(i, m): v for i, m, v in measurements if m in THROUGHPUT and v > 0}
    alike: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        alike[key].append(i)
    ratios: dict[bool, list[float]] = {True: [], False: []}
    rows: dict[bool, set[int]] = {True: set(), False: set()}
    for group in alike.values():
        for n, a in enumerate(group):
            for b in group[n + 1:]:
                across = sources[a] != sources[b]
                for metric in THROUGHPUT:
                    if (a, metric) in value and (b, metric) in value:
                        x, y = value[(a, metric)], value[(b, metric)]
                        ratios[across].append(max(x, y) / min(x, y))
                        rows[across] |= {a, b}
    return Agreement(Disagreement.of(ratios[True], len(rows[True])),
                     Disagreement.of(ratios[False], len(rows[False])))
