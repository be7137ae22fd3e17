"""Write what ``gpuopt fit`` found back into the catalog: catalogs/efficiency.yaml and
catalogs/uncertainty.yaml, deterministically (same rows, same bytes)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from optimizer.calibration.bands import bands
from optimizer.calibration.ceiling import mfu_ceilings
from optimizer.calibration.crossval import Dataset, Validation
from optimizer.calibration.data import Kind, data_files
from optimizer.calibration.fit import FitResult
from optimizer.catalog import Catalog
from optimizer.catalog.efficiency_table import EfficiencyFile, Parameter

EFFICIENCY_HEADER = """\
# Efficiency parameters of the performance model (optimizer/perf/params.py), fitted by `gpuopt fit`
# to the published runs in calibration/ (optimizer/calibration/fit.py says how). Each parameter has
# a meaning, a physical range, a documented prior, a default (what a GPU family or stack without
# calibration rows gets) and values per GPU family (`family` or `family/precision`) and per stack or
# engine (`id`, `id@family` or `id@family/precision`, as `by` allows) where at least three rows depend
# on it; `rows` and `sources` say what is behind each value.
# Stack values multiply the hardware value when `multiply` is true, else they replace it.
# An earlier engine release (stacks.yaml `earlier_release`) reading a `release_trend` overhead from the
# engine it precedes takes it times `release_overhead`, the median ratio of the fitted release pairs.
# Written by `gpuopt fit`: edit the priors and ranges, not the fitted values.
"""

UNCERTAINTY_HEADER = """\
# How far measurements fall from the model on sources it was not fitted to: quantiles of
# measured / predicted over the leave-one-source-out comparisons (optimizer/calibration/bands.py),
# sources weighted equally, split-conformal widening. `calibrated`: the prediction's GPU family and
# stack have calibration rows of their own; `extrapolated`: one of them borrows its values.
# Each kind also has a band per regime (`regimes`): serving a replica at a batch (a latency limit,
# a fixed concurrency or request rate) or at maximum load (the most sequences that fit, or a
# burst), training a dense model or a mixture-of-experts one; and per GPU vendor within each
# regime (`vendors`; a vendor with fewer than three sources in a regime has the regime's band of
# every vendor there).
# `widening`: how far each quantile's log distance from the median is stretched, below the median
# (`low`) and above it (`high`), so that at most 5 % of the rows of sources left out fall beyond
# each side, per group, regime and GPU vendor (bands.py).
# A 90 % band is [q05, q95]; planning at 90 % confidence multiplies every predicted rate by q10.
# Written by `gpuopt fit`; a test keeps them equal to what the fit produces.
"""


def _support(result: FitResult, ds: Dataset, sens: dict[str, np.ndarray]) -> list[tuple[int, int]]:
    """(rows, sources) behind each free value: the rows that depend on its parameter and read it or
    a value shrunk toward it (a family's value rests on its precisions' rows too)."""
    layout = result.layout
    sources = ds.sources

    def ancestors(i: int) -> set[int]:
        out = set()
        while i >= 0:
            out.add(i)
            i = layout.slots[i].parent
        return out

    lineage = [ancestors(i) for i in range(len(layout.slots))]
    out = []
    for i, s in enumerate(layout.slots):
        users = [j for j in range(len(layout.slots)) if i in lineage[j] and layout.slots[j].param == s.param]
        reads = np.isin(layout.hw_index[s.param], users) | np.isin(layout.stack_index[s.param], users)
        rows = reads & sens[s.param]
        out.append((int(rows.sum()), len(set(sources[rows]))))
    return out


def _value(v: float, rows: int, sources: int) -> dict[str, Any]:
    """Four significant figures: overheads of microseconds must not round to zero."""
    return {"value": float(f"{v:.4g}"), "rows": rows, "sources": sources}


def _head(table: EfficiencyFile, fits: dict[str, tuple[FitResult, Dataset, dict]], fitted: str) -> dict[str, Any]:
    """The table's fixed figures, and the MFU ceiling of the training rows (plans above it are model errors)."""
    data: dict[str, Any] = {"schema_version": table.schema_version, "fitted": fitted, "families": dict(table.families),
                            "reserved_memory_gb": table.reserved_memory_gb,
                            "reserved_memory_source": table.reserved_memory_source,
                            "memory_headroom": table.memory_headroom,
                            "memory_headroom_source": table.memory_headroom_source}
    if "training" in fits:
        data["mfu_ceiling"] = mfu_ceilings(list(fits["training"][1].cases))
    elif table.mfu_ceiling is not None:
        data["mfu_ceiling"] = table.mfu_ceiling.model_dump()
    if "serving" in fits and fits["serving"][0].layout.release_names:
        layout, x = fits["serving"][0].layout, fits["serving"][0].x
        pairs = sorted(layout.release_names)
        data["release_overhead"] = {
            "value": float(f"{layout.release_ratio(x):.4g}"), "pairs": len(pairs),
            "source": "`gpuopt fit`: the median ratio of an earlier engine release's fitted host overhead to "
                      f"its successor's over {len(pairs)} pairs: {'; '.join(pairs)}"}
    elif "serving" not in fits and table.release_overhead is not None:
        data["release_overhead"] = table.release_overhead.model_dump()
    data["support"] = {}
    return data


def _declared(p: Parameter) -> dict[str, Any]:
    """A parameter's hand-written part (what it means, its range and prior), in file order."""
    entry: dict[str, Any] = {"meaning": p.meaning, "range": list(p.range), "prior": p.prior,
                             "prior_source": p.prior_source, "by": list(p.by)}
    if p.multiply:
        entry["multiply"] = True
    if p.stack_floor is not None:
        entry.update(stack_floor=p.stack_floor, stack_floor_source=p.stack_floor_source)
    if not p.pooled:
        entry["pooled"] = False
    if p.release_trend:
        entry["release_trend"] = True
    return entry


def efficiency_yaml(table: EfficiencyFile, fits: dict[str, tuple[FitResult, Dataset, dict]], fitted: str) -> str:
    data = _head(table, fits, fitted)
    for kind in ("training", "serving"):
        params = getattr(table, kind)
        out: dict[str, Any] = {}
        if kind in fits:
            result, ds, sens = fits[kind]
            support = _support(result, ds, sens)
            data["support"][kind] = {
                "families": dict(sorted(_count(c.family for c in ds.cases).items())),
                "stacks": dict(sorted(_count(c.stack for c in ds.cases).items())),
            }
        for name, p in params.items():
            entry = _declared(p)
            entry.update(default=p.default.model_dump(), hardware={}, stacks={})
            if kind in fits:
                for slot, x, (rows, srcs) in zip(result.layout.slots, result.x, support, strict=True):
                    if slot.param != name:
                        continue
                    if slot.key == "default":
                        entry["default"] = _value(x, rows, srcs)
                    elif slot.key.startswith("hw:") and rows:
                        entry["hardware"][slot.key[3:]] = _value(x, rows, srcs)
                    elif slot.key.startswith("stack:") and rows:
                        entry["stacks"][slot.key[6:]] = _value(x, rows, srcs)
            entry["hardware"] = dict(sorted(entry["hardware"].items()))
            entry["stacks"] = dict(sorted(entry["stacks"].items()))
            out[name] = entry
        data[kind] = out
    return EFFICIENCY_HEADER + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110)


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def _band_section(groups: dict[str, dict], source: str) -> dict[str, Any]:
    return {group: {"rows": band["rows"], "sources": band["sources"], "source": source,
                    "ratio_quantiles": band["ratio_quantiles"]}
            for group, band in groups.items() if group in ("calibrated", "extrapolated")}


def uncertainty_yaml(validations: dict[str, Validation]) -> str:
    data: dict[str, Any] = {"schema_version": 1}
    for kind, v in validations.items():
        found = bands(list(v.out_of_source))
        source = f"leave-one-source-out comparisons of calibration/{kind}_runs*.csv"
        section = _band_section(found, source)
        section["widening"] = found["widening"]
        if "regimes" in found:
            section["regimes"] = {regime: _band_section(groups, source) for regime, groups in found["regimes"].items()}
        if "vendors" in found:
            section["vendors"] = {vendor: {"regimes": {regime: _band_section(groups, source)
                                                       for regime, groups in entry["regimes"].items()}}
                                  for vendor, entry in found["vendors"].items()}
        data[kind] = section
    return UNCERTAINTY_HEADER + yaml.safe_dump(data, sort_keys=False, width=110)


SOURCES_HEADER = """\
# Calibration sources

Every document behind `calibration/*.csv`, once. A row belongs to the source whose id prefix starts
it (`calibration/sources.yaml`, which also gives each source's stack or engine, how it counts FLOPs,
the facts its rows leave out and why, and the rows the model does not try). `gpuopt validate --cv
source` predicts each source from a fit that never saw it. Written by `gpuopt fit` from
`calibration/sources.yaml`; the per-file notes (`training_runs_2.md` to `{training}.md`,
`serving_runs_2.md` to `{serving}.md`) describe how the rows were read.

| source | kind | document | where | date | stack / engine | rows | expressed |
|---|---|---|---|---|---|---:|---:|
"""


def sources_markdown(sources, datasets: dict[str, Dataset]) -> str:
    """calibration/SOURCES.md: one line per source with its rows and how many the model expresses."""
    expressed: dict[str, int] = {}
    total: dict[str, int] = {}
    for ds in datasets.values():
        for c in ds.cases:
            expressed[c.source] = expressed.get(c.source, 0) + 1
            total[c.source] = total.get(c.source, 0) + 1
        for _, source, _ in ds.skipped:
            total[source] = total.get(source, 0) + 1
    lines = [f"| {s.id} | {s.kind} | {s.title} | {s.where} | {s.date} | {s.stack} | {total.get(s.id, 0)} | "
             f"{expressed.get(s.id, 0)} |" for s in sources]
    kinds: tuple[Kind, ...] = ("training", "serving")
    last = {kind: data_files(kind)[-1].removesuffix(".csv") for kind in kinds}
    return SOURCES_HEADER.format(**last) + "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Refit:
    """What ``gpuopt fit`` did: the files that differ from the fit (written, unless only checked)."""

    differ: tuple[str, ...]
    fitted: str  # "`gpuopt fit` on DATE: training N rows from S sources, …"
    checked_only: bool

    def text(self) -> str:
        verb = "differ from the fit" if self.checked_only else "written"
        return f"{', '.join(self.differ) or 'nothing'} {verb if self.differ else 'changed'}; {self.fitted}\n"


def refit(catalog: Catalog, root: Path, check: bool = False,
          progress: Callable[[str, int, str], None] | None = None, workers: int = 1) -> Refit:
    """Refit the efficiency parameters and the bands from calibration/ and write them to
    ``root``/efficiency.yaml and uncertainty.yaml and calibration/SOURCES.md (deterministic: same
    rows, same files). Parameters are fitted on every row; the bands come from the
    leave-one-source-out residuals. ``check``: compare only, write nothing. ``workers``: processes
    for the fits (the files are the same with any number)."""
    from optimizer.calibration.crossval import cross_validate, load_dataset
    from optimizer.calibration.data import default_data_dir, load_sources

    fits, validations = {}, {}
    for kind in ("training", "serving"):
        ds = load_dataset(kind, catalog)
        tell = (lambda i, source, kind=kind: progress(kind, i, source)) if progress else None
        v = cross_validate(ds, catalog, tell, workers)
        assert v.fit is not None and v.sensitivity is not None  # a cross-validation always fits on every row
        fits[kind] = (v.fit, ds, v.sensitivity)
        validations[kind] = v
    rows = {k: len(f[1].cases) for k, f in fits.items()}
    sources = {k: len({c.source for c in f[1].cases}) for k, f in fits.items()}
    fitted = (f"`gpuopt fit` on {date.today().isoformat()}: training {rows['training']} rows from "
              f"{sources['training']} sources, serving {rows['serving']} rows from {sources['serving']} sources")
    files = {root / "efficiency.yaml": efficiency_yaml(catalog.efficiency.table, fits, fitted),
             root / "uncertainty.yaml": uncertainty_yaml(validations),
             default_data_dir() / "SOURCES.md": sources_markdown(load_sources(), {k: f[1] for k, f in fits.items()})}
    differ = []
    for path, text in files.items():
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        if _strip_date(old) != _strip_date(text):
            differ.append(path.name)
            if not check:
                path.write_text(text, encoding="utf-8")
    return Refit(tuple(differ), fitted, check)


def _strip_date(text: str) -> str:
    """The files without the fit's date, so that refitting unchanged rows changes nothing."""
    return re.sub(r"`gpuopt fit` on \d{4}-\d{2}-\d{2}", "`gpuopt fit`", text)
