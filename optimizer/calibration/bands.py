"""Uncertainty bands from out-of-source residuals, and the coverage they achieve.

A band is a set of quantiles of ``measured / predicted`` over the leave-one-source-out
comparisons of a kind (FIDELITY.md section 3): it measures how wrong the model is on a source it
never saw, not on the ones it was fitted to. Sources are the exchangeable units, so every source's
rows share a weight of 1. Bands are kept apart for predictions whose GPU family and stack had
calibration rows of their own ("calibrated") and those that had to borrow ("extrapolated"), which
are wider. Serving bands are also kept per regime (a "Mondrian" split, FIDELITY.md section 3):
a replica planned at a batch (a latency limit, a fixed concurrency or request rate) is much better
predicted than one at maximum load, where bursts of requests and engine caps decide, so each takes
the band of the rows measured like it.

How wide: split-conformal's finite-sample correction (Angelopoulos & Bates 2021, arXiv
2107.07511) reaches for the ``(n+1)/n`` level, which with the 3-10 sources of a group is the most
extreme row of all: a 90 % band covering 97 % of new sources and spanning 0.1-3.6×. Instead each
quantile's log distance from the median is stretched by the least factor (``WIDENING``) at which
the bands cover the nominal 90 % of sources left out, in every serving regime, a factor per group
(Mondrian again): the rows of an engine release no other source measured must not stretch the
band of predictions whose GPU and stack are calibrated. ``coverage`` scores each source against
bands built, and widened, without it (a nested leave-one-source-out), so the figure it reports
is not the one the widening was chosen on.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict
from itertools import accumulate
from typing import Any

from optimizer.calibration.data import THROUGHPUT, Comparison
from optimizer.catalog import AT_BATCH, AT_MAX_LOAD, QUANTILES

MIN_SOURCES = 3  # a group needs this many sources for a band of its own
NOMINAL = 0.90  # a 90 % band: [q05, q95]
WIDENING = tuple(round(1.0 + 0.05 * i, 2) for i in range(41))  # factors tried, least first (1 to 3)
GROUPS = ("calibrated", "extrapolated")
Widening = dict[str, float]  # a factor per band: "calibrated", "at a batch/calibrated", ... (_cell)
SERVING_RATES = ("output_tokens_per_s", "total_tokens_per_s")


def group_of(c: Comparison) -> str:
    return "extrapolated" if c.extrapolated else "calibrated"


def regime_of(c: Comparison) -> str | None:
    """A serving comparison's band regime: at maximum load (the most sequences that fit, or a burst
    of requests) or at a batch (batch 1, a fixed batch or concurrency, a request rate); None for
    training, whose bands are not split."""
    if c.metric not in SERVING_RATES:
        return None
    return AT_MAX_LOAD if c.regime.startswith("maximum load") else AT_BATCH


def _weighted_quantiles(values: list[float], weights: list[float], levels: list[float]) -> list[float]:
    """For each level q in [0, 1], the smallest value whose cumulative weight reaches q of the total."""
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(weights)
    cumulative = list(accumulate(w for _, w in pairs))
    return [pairs[min(bisect_left(cumulative, q * total - 1e-12), len(pairs) - 1)][0] for q in levels]


def ratio_quantiles(comparisons: list[Comparison], widening: float = 1.0) -> dict[int, float]:
    """Quantiles of measured / predicted, sources weighted equally; each one's distance from the
    median, in log ratio, stretched by ``widening`` (a conformal scaling of the residuals: widening
    the quantile levels instead jumps to the one most extreme row as a level nears 0 or 1)."""
    per_source: dict[str, int] = defaultdict(int)
    for c in comparisons:
        per_source[c.source] += 1
    logs = [c.log_ratio for c in comparisons]
    weights = [1.0 / per_source[c.source] for c in comparisons]
    median, *levels = _weighted_quantiles(logs, weights, [0.5] + [q / 100.0 for q in QUANTILES])
    return {q: round(math.exp(median + (v - median) * widening), 3) for q, v in zip(QUANTILES, levels, strict=True)}


def throughput(comparisons) -> list[Comparison]:
    return [c for c in comparisons if c.metric in THROUGHPUT]


def _cell(regime: str | None, group: str) -> str:
    """The key of a band's widening: its group, in its regime where there is one."""
    return group if regime is None else f"{regime}/{group}"


def _groups(rows: list[Comparison], fallback: dict[str, Any] | None, widening: Widening,
            regime: str | None = None) -> dict[str, Any]:
    """Band per group ("calibrated", "extrapolated") of ``rows``, each at its own widening. A group
    with too few sources takes the band of all ``rows`` together, or ``fallback``'s band of that
    group where ``rows`` too have too few sources; an extrapolated band is never narrower than the
    calibrated one."""
    sources = {c.source for c in rows}
    out: dict[str, Any] = {}
    for group in GROUPS:
        members = [c for c in rows if group_of(c) == group]
        own = {c.source for c in members}
        k = widening[_cell(regime, group)]
        entry: dict[str, Any]
        if len(own) >= MIN_SOURCES:
            entry = {"rows": len(members), "sources": len(own), "ratio_quantiles": ratio_quantiles(members, k)}
        elif fallback is not None and len(sources) < MIN_SOURCES:
            entry = dict(fallback[group])
        else:
            everything = ratio_quantiles(rows, k) if rows else {q: 1.0 for q in QUANTILES}
            entry = {"rows": len(rows), "sources": len(sources), "ratio_quantiles": everything}
        if group == "extrapolated" and "calibrated" in out:  # never narrower than the calibrated band
            cal = out["calibrated"]["ratio_quantiles"]
            entry["ratio_quantiles"] = {q: round(min(v, cal[q]) if q < 50 else max(v, cal[q]) if q > 50 else v, 3)
                                        for q, v in entry["ratio_quantiles"].items()}
        out[group] = entry
    return out


def _regimes(rows: list[Comparison]) -> list[str]:
    return sorted({r for r in map(regime_of, rows) if r is not None})


def bands(comparisons: list[Comparison], widening: Widening | None = None) -> dict[str, Any]:
    """Band per group ("calibrated", "extrapolated") of the throughput comparisons, and for serving
    the same per regime (``regimes``: at a batch, at maximum load), at ``widening`` (default: the
    least per band that covers the nominal share of sources left out, ``widening_for``)."""
    rows = throughput(comparisons)
    k = widening_for(rows) if widening is None else widening
    out = _groups(rows, None, k)
    if regimes := _regimes(rows):
        out["regimes"] = {r: _groups([c for c in rows if regime_of(c) == r], out, k, r) for r in regimes}
    out["widening"] = dict(k)
    return out


def widening_for(rows: list[Comparison]) -> Widening:
    """Per band (group, and regime where serving has them), the least factor of ``WIDENING`` at
    which leave-one-source-out bands cover ``NOMINAL`` of its rows (each source weighted by its
    rows, as a buyer meets them); the largest factor if none does. Coverage grows with the factor
    (the bands nest), so each is found by bisection. Calibrated bands are chosen first: an
    extrapolated band is never narrower. A group's band over every regime takes the widest of its
    regimes' factors."""
    regimes: list[str | None] = list(_regimes(rows)) or [None]
    chosen = {_cell(r, g): WIDENING[-1] for r in regimes for g in GROUPS}
    chosen.update(dict.fromkeys(GROUPS, WIDENING[-1]))
    for regime in regimes:
        for group in GROUPS:
            cell = _cell(regime, group)
            key = group if regime is None else f"{group} band: {regime}"

            def covers(i: int, cell: str = cell, key: str = key) -> bool:
                hits = _hits(rows, lambda others: bands(others, {**chosen, cell: WIDENING[i]}))
                return key not in hits or sum(hits[key]) / len(hits[key]) >= NOMINAL

            lo, hi = 0, len(WIDENING) - 1
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if covers(mid) else (mid + 1, hi)
            chosen[cell] = WIDENING[lo]
    for group in GROUPS:
        chosen[group] = max(chosen[_cell(r, group)] for r in regimes)
    return chosen


def band_of(band: dict[str, dict], c: Comparison) -> dict[int, float]:
    """The ratio quantiles a comparison is judged by: its regime's band where there is one."""
    regime = regime_of(c)
    section = band.get("regimes", {}).get(regime, band) if regime else band
    return section[group_of(c)]["ratio_quantiles"]


def _hits(rows: list[Comparison], make_bands, low: int = 5, high: int = 95) -> dict[str, list[bool]]:
    """Whether each row falls inside the band ``make_bands`` builds from every other source."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for source in sorted({c.source for c in rows}):
        others = [c for c in rows if c.source != source]
        if not others:
            continue
        band = make_bands(others)
        for c in (c for c in rows if c.source == source):
            q = band_of(band, c)
            inside = q[low] <= c.measured / c.predicted <= q[high]
            hits["all"].append(inside)
            hits[group_of(c)].append(inside)
            if regime_of(c):
                hits[f"band: {regime_of(c)}"].append(inside)
                hits[f"{group_of(c)} band: {regime_of(c)}"].append(inside)
            hits[f"regime: {c.regime}"].append(inside)
            hits[f"source: {c.source}"].append(inside)
    return hits


def coverage(comparisons: list[Comparison], low: int = 5, high: int = 95) -> dict[str, float]:
    """Share of out-of-source rows inside the band built from every other source, its widening
    chosen on those sources alone (overall, by group, band regime, regime and source): the band's
    coverage as a buyer with a new source would see it."""
    hits = _hits(throughput(comparisons), bands, low, high)
    return {k: sum(v) / len(v) for k, v in sorted(hits.items())}
