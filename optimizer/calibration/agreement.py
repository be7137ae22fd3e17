"""How far the published measurements disagree among themselves, where the model cannot tell them apart.

Two rows with the same work (model, hardware, plan) on the same GPU family, precision and stack get
the same prediction from any one set of parameters, up to a known factor (a serving row's total
throughput is its output throughput times (input + output) / output; a training row's tokens/s, MFU
and TFLOP/s are each a constant over the step time). Whatever separates their measurements beyond
that factor (a harness, a clock, a driver, a person's settings) is beyond any model of the hardware
and the engine. Pairs measured by two sources show how far independent benchmarks of one setup
disagree; pairs measured twice by one source, the noise of a benchmark against itself. A pair's
disagreement is the larger rate over the smaller, minus one: no prediction comes within 16.7 % of
both rows of a pair 40 % apart (the best, 1.17 times the smaller, is 1/1.2 of the larger).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from optimizer.calibration.data import percentile


@dataclass(frozen=True)
class Disagreement:
    """Pairs of indistinguishable rows and how far apart their rates were measured."""

    pairs: int
    rows: int  # distinct rows in the pairs
    median: float  # of larger / smaller − 1 over the pairs (nan without pairs)
    p90: float

    @classmethod
    def of(cls, ratios: list[float], rows: int) -> Disagreement:
        """The figures of pairs whose larger / smaller rates are ``ratios``, over ``rows`` rows."""
        if not ratios:
            return cls(0, 0, float("nan"), float("nan"))
        gaps = [r - 1.0 for r in ratios]
        return cls(len(gaps), rows, statistics.median(gaps), percentile(gaps, 90))


@dataclass(frozen=True)
class Agreement:
    """Disagreement of indistinguishable rows, split by whether one source measured both."""

    across_sources: Disagreement  # the two rows from different sources
    within_source: Disagreement  # both rows from one source (replicates)


def agreement(keys: Sequence[Hashable], sources: Sequence[str], rates: Mapping[int, float]) -> Agreement:
    """``keys[i]``: what the model sees of row ``i`` (rows with equal keys get equal predictions of
    their rate); ``sources[i]``: its source; ``rates[i]``: its measured rate in the units that
    prediction is in (rows without one, or with none above zero, are left out)."""
    alike: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        if rates.get(i, 0.0) > 0.0:
            alike[key].append(i)
    ratios: dict[bool, list[float]] = {True: [], False: []}
    rows: dict[bool, set[int]] = {True: set(), False: set()}
    for group in alike.values():
        for n, a in enumerate(group):
            for b in group[n + 1:]:
                across = sources[a] != sources[b]
                ratios[across].append(max(rates[a], rates[b]) / min(rates[a], rates[b]))
                rows[across] |= {a, b}
    return Agreement(Disagreement.of(ratios[True], len(rows[True])),
                     Disagreement.of(ratios[False], len(rows[False])))
