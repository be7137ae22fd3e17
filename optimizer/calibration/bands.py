"""Uncertainty bands from out-of-source residuals, and the coverage they achieve.

A band is a set of quantiles of ``measured / predicted`` over the leave-one-source-out
comparisons of a kind (FIDELITY.md section 3): it measures how wrong the model is on a source it
never saw, not on the ones it was fitted to. Sources are the exchangeable units, so every source's
rows share a weight of 1, and the quantile levels get split-conformal's finite-sample correction
(Angelopoulos & Bates 2021, arXiv 2107.07511): with ``n`` sources the band reaches for the
``⌈(n+1)(1−α)⌉/n`` level. Bands are kept apart for predictions whose GPU family and stack had
calibration rows of their own ("calibrated") and those that had to borrow ("extrapolated"), which
are wider. ``coverage`` checks the claim honestly: each source is scored against a band built
without it.
"""

from __future__ import annotations

import math
from collections import defaultdict

from optimizer.calibration.data import THROUGHPUT, Comparison
from optimizer.catalog import QUANTILES

MIN_SOURCES = 3  # a group needs this many sources for a band of its own


def group_of(c: Comparison) -> str:
    return "extrapolated" if c.extrapolated else "calibrated"


def _weighted_quantile(values: list[float], weights: list[float], q: float) -> float:
    """The smallest value whose cumulative weight reaches ``q`` of the total (q in [0, 1])."""
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(weights)
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= q * total - 1e-12:
            return v
    return pairs[-1][0]


def ratio_quantiles(comparisons: list[Comparison]) -> dict[int, float]:
    """Quantiles of measured / predicted, sources weighted equally, conformally widened."""
    per_source: dict[str, int] = defaultdict(int)
    for c in comparisons:
        per_source[c.source] += 1
    n = len(per_source)
    logs = [c.log_ratio for c in comparisons]
    weights = [1.0 / per_source[c.source] for c in comparisons]
    out = {}
    for q in QUANTILES:
        level = q / 100.0
        # split-conformal: push each tail out by the finite-sample correction (n + 1) / n
        adjusted = 0.5 + (level - 0.5) * (n + 1) / n if n else level
        adjusted = min(max(adjusted, 0.0), 1.0)
        out[q] = round(math.exp(_weighted_quantile(logs, weights, adjusted)), 3)
    return out


def throughput(comparisons) -> list[Comparison]:
    return [c for c in comparisons if c.metric in THROUGHPUT]


def bands(comparisons: list[Comparison]) -> dict[str, dict]:
    """Band per group ("calibrated", "extrapolated") of the throughput comparisons; a group with too
    few sources takes the band of all rows together, which is wider."""
    rows = throughput(comparisons)
    everything = ratio_quantiles(rows) if rows else {q: 1.0 for q in QUANTILES}
    out = {}
    for group in ("calibrated", "extrapolated"):
        members = [c for c in rows if group_of(c) == group]
        sources = {c.source for c in members}
        if len(sources) >= MIN_SOURCES:
            quantiles = ratio_quantiles(members)
        else:
            members, sources, quantiles = rows, {c.source for c in rows}, everything
        if group == "extrapolated" and "calibrated" in out:  # never narrower than the calibrated band
            cal = out["calibrated"]["ratio_quantiles"]
            quantiles = {q: round(min(v, cal[q]) if q < 50 else max(v, cal[q]) if q > 50 else v, 3)
                         for q, v in quantiles.items()}
        out[group] = {"rows": len(members), "sources": len(sources), "ratio_quantiles": quantiles}
    return out


def coverage(comparisons: list[Comparison], low: int = 5, high: int = 95) -> dict[str, float]:
    """Share of out-of-source rows inside the band built from every other source (overall and by
    group): the band's coverage as a buyer with a new source would see it."""
    rows = throughput(comparisons)
    hits: dict[str, list[bool]] = defaultdict(list)
    for source in sorted({c.source for c in rows}):
        others = [c for c in rows if c.source != source]
        if not others:
            continue
        band = bands(others)
        for c in (c for c in rows if c.source == source):
            q = band[group_of(c)]["ratio_quantiles"]
            inside = q[low] <= c.measured / c.predicted <= q[high]
            hits["all"].append(inside)
            hits[group_of(c)].append(inside)
            hits[f"regime: {c.regime}"].append(inside)
            hits[f"source: {c.source}"].append(inside)
    return {k: sum(v) / len(v) for k, v in sorted(hits.items())}
