"""Uncertainty bands from out-of-source residuals, and the coverage they achieve.

A band is a set of quantiles of ``measured / predicted`` over the leave-one-source-out
comparisons of a kind (FIDELITY.md section 3): it measures how wrong the model is on a source it
never saw, not on the ones it was fitted to. Sources are the exchangeable units, so every source's
rows share a weight of 1. Bands are kept apart for predictions whose GPU family and stack had
calibration rows of their own ("calibrated") and those that had to borrow ("extrapolated"), which
are wider. Bands are also kept per regime (a "Mondrian" split, FIDELITY.md section 3): a serving
replica planned at a batch (a latency limit, a fixed concurrency or request rate) is much better
predicted than one at maximum load, where bursts of requests and engine caps decide, and a dense
model's training step much better than a mixture-of-experts model's (expert parallelism, all-to-all,
load imbalance: out of source 16-30 % median against 6-10 %, and a band over both covered 60 % of
new MoE sources), so each takes the band of the rows measured like it; and per GPU vendor within a
regime (where the vendor has ``MIN_SOURCES`` sources there), because engine releases are built per
vendor: vLLM 0.6 on ROCm ran MI300X at a quarter of the prediction in one source, which says nothing
of TensorRT-LLM on H100.

How wide: split-conformal's finite-sample correction (Angelopoulos & Bates 2021, arXiv
2107.07511) reaches for the ``(n+1)/n`` level, which with the 3-10 sources of a group is the most
extreme row of all: a 90 % band covering 97 % of new sources and spanning 0.1-3.6×. Instead each
quantile's log distance from the median is stretched by the least factor (``WIDENING``) at which
the bands cover the nominal 90 % of sources left out, in every regime, a factor per group
(Mondrian again): the rows of an engine release no other source measured must not stretch the
band of predictions whose GPU and stack are calibrated. The lower and upper tails take factors of
their own, each the least at which at most 5 % of those rows fall beyond it (the asymmetric form
of conformalised quantiles, Romano, Patterson & Candès 2019, arXiv 1905.03222, theorem 2): a
model too slow on new sources must not widen its band toward too fast. ``coverage`` scores each source against
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
from optimizer.catalog.records import train_regime

MIN_SOURCES = 3  # a group needs this many sources for a band of its own
NOMINAL = 0.90  # a 90 % band: [q05, q95]
WIDENING = tuple(round(1.0 + 0.05 * i, 2) for i in range(41))  # factors tried, least first (1 to 3)
GROUPS = ("calibrated", "extrapolated")
Widening = dict[str, float]  # a factor per band and side: "calibrated/low", "at a batch/NVIDIA/calibrated/high"
SERVING_RATES = ("output_tokens_per_s", "total_tokens_per_s")
SIDES = ("low", "high")  # a band's widening below its median and above it
QUANTILE_DECIMALS = 3  # a band's quantiles are written to this many decimals


def group_of(c: Comparison) -> str:
    return "extrapolated" if c.extrapolated else "calibrated"


def regime_of(c: Comparison) -> str | None:
    """A comparison's band regime. Serving: at maximum load (the most sequences that fit, or a burst
    of requests) or at a batch (batch 1, a fixed batch or concurrency, a request rate). Training: a
    mixture-of-experts model or a dense one. None for a latency."""
    if c.metric in SERVING_RATES:
        return AT_MAX_LOAD if c.regime.startswith("maximum load") else AT_BATCH
    if c.metric in THROUGHPUT:
        return train_regime(c.regime.startswith("moe"))
    return None


def _weighted_quantiles(values: list[float], weights: list[float], levels: list[float]) -> list[float]:
    """For each level q in [0, 1], the smallest value whose cumulative weight reaches q of the total."""
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(weights)
    cumulative = list(accumulate(w for _, w in pairs))
    return [pairs[min(bisect_left(cumulative, q * total - 1e-12), len(pairs) - 1)][0] for q in levels]


def ratio_quantiles(comparisons: list[Comparison], widening: float | tuple[float, float] = 1.0) -> dict[int, float]:
    """Quantiles of measured / predicted, sources weighted equally; each one's distance from the
    median, in log ratio, stretched by ``widening`` (a conformal scaling of the residuals: widening
    the quantile levels instead jumps to the one most extreme row as a level nears 0 or 1), by a
    factor of its own below the median and above it where ``widening`` is a pair (a model that is
    too slow on new sources, not too fast, needs only its upper tail stretched)."""
    return _widened(_log_quantiles(comparisons), widening)


def _log_quantiles(comparisons: list[Comparison]) -> tuple[float, dict[int, float]]:
    """The median and the ``QUANTILES`` of log(measured / predicted), sources weighted equally."""
    per_source: dict[str, int] = defaultdict(int)
    for c in comparisons:
        per_source[c.source] += 1
    logs = [c.log_ratio for c in comparisons]
    weights = [1.0 / per_source[c.source] for c in comparisons]
    median, *levels = _weighted_quantiles(logs, weights, [0.5] + [q / 100.0 for q in QUANTILES])
    return median, dict(zip(QUANTILES, levels, strict=True))


def _widened(raw: tuple[float, dict[int, float]], widening: float | tuple[float, float]) -> dict[int, float]:
    below, above = widening if isinstance(widening, tuple) else (widening, widening)
    median, levels = raw
    return {q: round(math.exp(median + (v - median) * (below if q < 50 else above)), QUANTILE_DECIMALS)
            for q, v in levels.items()}


def throughput(comparisons) -> list[Comparison]:
    return [c for c in comparisons if c.metric in THROUGHPUT]


def _cell(regime: str | None, group: str, vendor: str = "") -> str:
    """The key of a band's widening: its group, in its regime where there is one, for its GPU
    vendor where the band is one vendor's ("at a batch/NVIDIA/calibrated")."""
    return group if regime is None else f"{regime}/{vendor + '/' if vendor else ''}{group}"


def _structure_groups(rows: list[Comparison], has_fallback: bool, regime: str | None = None,
                      vendor: str = "") -> dict[str, Any]:
    """Per group ("calibrated", "extrapolated") of ``rows``, what its band is made of, whatever the
    widening: its own rows' log quantiles, those of all ``rows`` together where the group has too
    few sources, or (None) the fallback's band where ``rows`` too have too few sources."""
    sources = {c.source for c in rows}
    by_group: dict[str, list[Comparison]] = {group: [] for group in GROUPS}
    for c in rows:
        by_group[group_of(c)].append(c)
    out: dict[str, Any] = {}
    for group in GROUPS:
        members = by_group[group]
        own = {c.source for c in members}
        if len(own) >= MIN_SOURCES:
            out[group] = {"rows": len(members), "sources": len(own), "raw": _log_quantiles(members)}
        elif has_fallback and len(sources) < MIN_SOURCES:
            out[group] = None
        else:
            raw = _log_quantiles(rows) if rows else (0.0, dict.fromkeys(QUANTILES, 0.0))
            out[group] = {"rows": len(rows), "sources": len(sources), "raw": raw}
        if out[group] is not None:
            out[group]["cell"] = _cell(regime, group, vendor)
    return out


def _groups(parts: dict[str, Any], fallback: dict[str, Any] | None, widening: Widening) -> dict[str, Any]:
    """Band per group from ``_structure_groups``, each at its own widening (a fallback's band as it
    is, cell included); an extrapolated band is never narrower than the calibrated one."""
    out: dict[str, Any] = {}
    for group in GROUPS:
        part = parts[group]
        if part is None:
            entry = dict(fallback[group]) if fallback is not None else {}
        else:
            cell = part["cell"]
            k = (widening.get(f"{cell}/{SIDES[0]}", 1.0), widening.get(f"{cell}/{SIDES[1]}", 1.0))
            entry = {**part, "ratio_quantiles": _widened(part["raw"], k)}
        if group == "extrapolated" and "calibrated" in out:  # never narrower than the calibrated band
            cal = out["calibrated"]["ratio_quantiles"]
            entry["ratio_quantiles"] = {q: round(min(v, cal[q]) if q < 50 else max(v, cal[q]) if q > 50 else v,
                                                  QUANTILE_DECIMALS)
                                        for q, v in entry["ratio_quantiles"].items()}
        out[group] = entry
    return out


def _regimes(rows: list[Comparison]) -> list[str]:
    return sorted({r for r in map(regime_of, rows) if r is not None})


def _vendors(rows: list[Comparison]) -> list[str]:
    return sorted({c.vendor for c in rows if c.vendor and regime_of(c)})


def _structure(rows: list[Comparison]) -> dict[str, Any]:
    """What ``bands`` builds from the rows, before any widening: the log quantiles of each group,
    per regime and per GPU vendor within a regime, and which bands fall back to which."""
    out: dict[str, Any] = {"all": _structure_groups(rows, False)}
    by_regime: dict[str, list[Comparison]] = defaultdict(list)
    for c in rows:
        if (regime := regime_of(c)) is not None:
            by_regime[regime].append(c)
    if regimes := sorted(by_regime):
        out["regimes"] = {r: _structure_groups(by_regime[r], True, r) for r in regimes}
        # and per GPU vendor: one vendor's engine releases say little about another's; a vendor with
        # too few sources in a regime takes the regime's band of every vendor
        out["vendors"] = {v: {r: _structure_groups([c for c in by_regime[r] if c.vendor == v], True, r, v)
                              for r in regimes} for v in _vendors(rows)}
    return out


def _apply(structure: dict[str, Any], widening: Widening) -> dict[str, Any]:
    out = _groups(structure["all"], None, widening)
    if "regimes" in structure:
        out["regimes"] = {r: _groups(parts, out, widening) for r, parts in structure["regimes"].items()}
        out["vendors"] = {v: {"regimes": {r: _groups(parts, out["regimes"][r], widening) for r, parts in by.items()}}
                          for v, by in structure["vendors"].items()}
    out["widening"] = dict(widening)
    return out


def bands(comparisons: list[Comparison], widening: Widening | None = None) -> dict[str, Any]:
    """Band per group ("calibrated", "extrapolated") of the throughput comparisons, and the same per
    regime (``regimes``: serving at a batch and at maximum load, training dense and MoE) and per GPU
    vendor in each regime (``vendors``), at ``widening`` (default: the least per band and side that
    covers the nominal share of sources left out, ``widening_for``)."""
    rows = throughput(comparisons)
    return _apply(_structure(rows), widening_for(rows) if widening is None else widening)


def widening_for(rows: list[Comparison]) -> Widening:
    """Per band (group, regime and GPU vendor), the least factor of
    ``WIDENING`` at which leave-one-source-out bands cover ``NOMINAL`` of the rows they judge (each
    source weighted by its rows, as a buyer meets them); the largest factor if none does. The
    bands nest in the factor, so each row comes inside at a factor of its own (``_needed``) and
    the least that covers the share is read off them, in one pass per band side. The bands of every
    vendor come first (a vendor with too few sources falls back to them), and calibrated bands
    before extrapolated ones, which are never narrower. A group's band over every regime takes the
    widest of its regimes' factors."""
    regimes: list[str | None] = list(_regimes(rows)) or [None]
    cells = [_cell(r, g, v) for v in ["", *_vendors(rows)] for r in regimes for g in GROUPS]  # pooled first
    chosen = dict.fromkeys([f"{c}/{side}" for c in [*cells, *GROUPS] for side in SIDES], WIDENING[-1])
    tail = 1.0 - (1.0 - NOMINAL) / 2.0  # each side misses at most half of what the band may
    # each source left out in turn: the rows of the others, made into bands once (widening is cheap)
    folds = [_fold(_structure([c for c in rows if c.source != source]), [c for c in rows if c.source == source])
             for source in sorted({c.source for c in rows}) if any(c.source != source for c in rows)]
    for cell, side in ((c, side) for c in cells for side in SIDES):
        key = f"{cell}/{side}"
        needed = _needed(folds, {**chosen, key: 1.0}, cell, side)
        if not needed:  # no row is judged by this band: nothing to widen
            chosen[key] = WIDENING[0]
            continue
        # the least factor at which the tail share of the rows need no more; then checked on the
        # bands as written (their quantiles rounded), one step wider while a rounding misses a row
        k = sorted(needed)[max(math.ceil(tail * len(needed)) - 1, 0)]
        i = next((j for j, w in enumerate(WIDENING) if w >= k - 1e-9), len(WIDENING) - 1)
        while i < len(WIDENING) - 1 and not _covers(folds, {**chosen, key: WIDENING[i]}, cell, side, tail):
            i += 1
        chosen[key] = WIDENING[i]
    for group, side in ((g, side) for g in GROUPS for side in SIDES):
        chosen[f"{group}/{side}"] = max(chosen[f"{_cell(r, group)}/{side}"] for r in regimes)
    return chosen


# (the other sources' band structure, one source's rows by the cell of the band that judges them)
Folds = list[tuple[dict[str, Any], dict[str, list[Comparison]]]]


def _fold(structure: dict[str, Any], held: list[Comparison]) -> tuple[dict[str, Any], dict[str, list[Comparison]]]:
    """A fold of ``widening_for``: which band judges each held-out row depends on the structure,
    not on the widening, so it is found once (and a band is built only for folds with rows in it)."""
    band = _apply(structure, {})
    by_cell: dict[str, list[Comparison]] = defaultdict(list)
    for c in held:
        by_cell[_entry(band, c)["cell"]].append(c)
    return structure, dict(by_cell)


def _judged(folds: Folds, widening: Widening, cell: str):
    """(row, the band entry that judges it) for every row the band ``cell`` judges when its source
    is left out."""
    for structure, by_cell in folds:
        if held := by_cell.get(cell):
            band = _apply(structure, widening)
            for c in held:
                yield c, _entry(band, c)


def _needed(folds: Folds, widening: Widening, cell: str, side: str) -> list[float]:
    """For each row the band ``cell`` judges when its source is left out, the least factor on
    ``side`` that keeps the row from falling beyond that side of the band: 1 if it is already
    inside, else how far its log ratio lies from the band's median in units of the unwidened
    quantile's distance (the band nests in the factor, so this is where the row comes inside)."""
    out = []
    for c, entry in _judged(folds, widening, cell):
        median, levels = entry["raw"]
        if _within(entry["ratio_quantiles"], c, side=side):
            out.append(1.0)
        elif side == "low":
            out.append((median - c.log_ratio) / max(median - levels[5], 1e-12))
        else:
            out.append((c.log_ratio - median) / max(levels[95] - median, 1e-12))
    return out


def _covers(folds: Folds, widening: Widening, cell: str, side: str, share: float) -> bool:
    """Whether at least ``share`` of the rows ``cell`` judges stay off that side of its band."""
    inside = [_within(e["ratio_quantiles"], c, side=side) for c, e in _judged(folds, widening, cell)]
    return not inside or sum(inside) / len(inside) >= share


def _within(q: dict[int, float], c: Comparison, low: int = 5, high: int = 95, side: str | None = None) -> bool:
    """Whether a row's measured / predicted lies inside the band ``q`` (with ``side``, only that it
    is not below the band, or not above it)."""
    ratio = c.measured / c.predicted
    return (side == "high" or q[low] <= ratio) and (side == "low" or ratio <= q[high])


def _entry(band: dict[str, dict], c: Comparison) -> dict[str, Any]:
    """The band a comparison is judged by: its vendor's in its regime, else its regime's, where
    there is one."""
    regime = regime_of(c)
    pooled = band.get("regimes", {}).get(regime, band) if regime else band
    section = band.get("vendors", {}).get(c.vendor, {}).get("regimes", {}).get(regime, pooled) if regime else pooled
    return section[group_of(c)]


def band_of(band: dict[str, dict], c: Comparison) -> dict[int, float]:
    """The ratio quantiles a comparison is judged by (``_entry``)."""
    return _entry(band, c)["ratio_quantiles"]


def _hits(rows: list[Comparison], make_bands, low: int = 5, high: int = 95,
          side: str | None = None) -> dict[str, list[bool]]:
    """Whether each row falls inside the band ``make_bands`` builds from every other source (with
    ``side``, only that it is not below the band, or not above it)."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for source in sorted({c.source for c in rows}):
        others = [c for c in rows if c.source != source]
        if not others:
            continue
        band = make_bands(others)
        for c in (c for c in rows if c.source == source):
            entry = _entry(band, c)
            inside = _within(entry["ratio_quantiles"], c, low, high, side)
            hits["all"].append(inside)
            if entry["cell"] != group_of(c):  # a band of the group over every regime: the group is the cell
                hits[entry["cell"]].append(inside)  # the rows each widening answers for
            hits[group_of(c)].append(inside)
            if regime_of(c):
                hits[f"band: {regime_of(c)}"].append(inside)
            hits[f"regime: {c.regime}"].append(inside)
            if not c.extrapolated:
                hits[f"calibrated regime: {c.regime}"].append(inside)
            hits[f"source: {c.source}"].append(inside)
            if regime_of(c) and c.vendor:
                hits[f"vendor: {c.vendor}"].append(inside)
    return hits


def coverage(comparisons: list[Comparison], low: int = 5, high: int = 95) -> dict[str, float]:
    """Share of out-of-source rows inside the band built from every other source, its widening
    chosen on those sources alone (overall, by group, band regime, regime and source): the band's
    coverage as a buyer with a new source would see it."""
    hits = _hits(throughput(comparisons), bands, low, high)
    return {k: sum(v) / len(v) for k, v in sorted(hits.items())}
