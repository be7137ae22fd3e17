"""Tables of the model against published runs: text, CSV and JSON of a ``Validation``."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import Any

from optimizer.calibration.bands import coverage, group_of, regime_of
from optimizer.calibration.crossval import Validation
from optimizer.calibration.data import LATENCY, THROUGHPUT, Comparison, percentile


def _errors(comparisons: list[Comparison]) -> dict[str, float]:
    errs = [abs(c.error) for c in comparisons]
    if not errs:
        return {"rows": 0, "median": float("nan"), "p90": float("nan")}
    return {"rows": len(errs), "median": statistics.median(errs), "p90": percentile(errs, 90)}


def _groups(v: Validation) -> list[tuple[str, str, list[Comparison], list[Comparison]]]:
    """(section, label, out-of-source, in-sample) for every line of the summary."""
    oos, ins = list(v.out_of_source), list(v.in_sample)
    same = {(c.row, c.metric): c for c in ins}
    lines = [("", "all (throughput)", [c for c in oos if c.metric in THROUGHPUT],
              [c for c in ins if c.metric in THROUGHPUT])]
    for metric in LATENCY:
        o = [c for c in oos if c.metric == metric]
        if not o:
            continue
        name = metric.replace("_ms", "").upper()
        lines.append(("", name, o, [c for c in ins if c.metric == metric]))
        # a latency target is met at a batch, concurrency or rate; under a burst or at maximum load
        # the queue sets it, which a buyer does not plan for: both on lines of their own
        for label, saturated in ((f"  {name} at a batch, concurrency or rate", False),
                                 (f"  {name} at maximum load or a burst", True)):
            o_part = [c for c in o if c.regime.startswith("maximum load") is saturated]
            if o_part and len(o_part) < len(o):
                lines.append(("", label, o_part, [c for c in ins if c.metric == metric
                                                  and c.regime.startswith("maximum load") is saturated]))
    for key, section in ((lambda c: c.regime, "by regime"), (regime_of, "by band"), (group_of, "by calibration"),
                         # what a buyer whose GPU and engine other sources measured may expect, per regime
                         (lambda c: None if c.extrapolated else c.regime, "calibrated, by regime"),
                         (lambda c: (c.vendor or None) if regime_of(c) else None, "by GPU vendor"),
                         (lambda c: c.source, "by source")):
        by_o: dict[str | None, list[Comparison]] = defaultdict(list)
        for c in oos:
            if c.metric in THROUGHPUT:
                by_o[key(c)].append(c)
        for label in sorted(k for k in by_o if k is not None):
            # the same rows in sample (a row is extrapolated only out of source)
            lines.append((section, label, by_o[label], [same[(c.row, c.metric)] for c in by_o[label]
                                                        if (c.row, c.metric) in same]))
    return lines


def summary(v: Validation) -> dict[str, Any]:
    """The figures the text and JSON show: per line, sources, rows, out-of-source and in-sample
    median and p90 |error|, and the 90 % band's coverage where it applies: out of source only (with
    the catalog's parameters the residuals are in sample, and bands built on them say nothing)."""
    cov = coverage(list(v.out_of_source)) if v.cv == "source" else {}
    out: dict[str, Any] = {"kind": v.kind, "expressed_rows": len({c.row for c in v.out_of_source}),
                           "skipped_rows": len(v.skipped), "coverage_90": cov.get("all"), "lines": [],
                           "agreement": _agreement(v)}
    for section, label, oos, ins in _groups(v):
        o, i = _errors(oos), _errors(ins)
        key = {"by regime": f"regime: {label}", "by band": f"band: {label}", "by GPU vendor": f"vendor: {label}",
               "by source": f"source: {label}",
               "calibrated, by regime": f"calibrated regime: {label}"}.get(section, label)
        out["lines"].append({
            "section": section, "label": label, "sources": len({c.source for c in oos}), "rows": o["rows"],
            "out_of_source": {"median": o["median"], "p90": o["p90"]},
            "in_sample": {"median": i["median"], "p90": i["p90"]},
            "coverage_90": cov.get("all") if label.startswith("all") else cov.get(key),
        })
    return out


def _agreement(v: Validation) -> dict[str, Any] | None:
    """The measurements' own disagreement where the model sees the same row (``calibration.agreement``)."""
    if v.agreement is None:
        return None
    return {name: {"pairs": d.pairs, "rows": d.rows, "median": d.median, "p90": d.p90}
            for name, d in (("across_sources", v.agreement.across_sources),
                            ("within_source", v.agreement.within_source))}


def _agreement_lines(agreement: dict[str, Any] | None) -> list[str]:
    """The text lines of ``_agreement`` (none where no two rows pair)."""
    if not agreement or not any(d["pairs"] for d in agreement.values()):
        return []
    out = ["  the measurements themselves, where the model sees the same row (same model, hardware, plan, stack",
           "  and precision: one set of parameters predicts one rate for both), larger rate over smaller:"]
    for name, label in (("across_sources", "measured by two sources"),
                        ("within_source", "measured twice by one source")):
        d = agreement[name]
        if d["pairs"]:
            pairs = f"{d['pairs']} pairs ({d['rows']} rows)"
            out.append(f"    {label:<30} {pairs:>20}   median {_pct(d['median'])}   p90 {_pct(d['p90'])}")
    return out


def _pct(x: float | None) -> str:
    return "   -  " if x is None or x != x else f"{x * 100:5.1f}%"


def text(validations: list[Validation], rows: bool = False) -> str:
    out = []
    for v in validations:
        s = summary(v)
        cv = ("out of source: each source predicted by a fit without it" if v.cv == "source"
              else "with the catalog's fitted parameters (in sample; --cv source for out of source)")
        out.append(f"{v.kind}: {s['expressed_rows']} rows expressed, {s['skipped_rows']} not "
                   f"({'listed below' if rows else 'gpuopt validate --rows lists them'}); {cv}")
        if not s["expressed_rows"]:
            out.append("  nothing to compare: no row could be expressed; the reasons are listed below"
                       if rows else "  nothing to compare: no row could be expressed (gpuopt validate --rows says why)")
            out += [f"    {row} [{src}]: {why}" for row, src, why in v.skipped] if rows else []
            out.append("")
            continue
        out.append(f"  {'':44} {'sources':>7} {'rows':>5}   {'out of source':^15}   {'in sample':^15}   "
                   f"{'90% band':>8}")
        out.append(f"  {'':44} {'':>7} {'':>5}   {'median':>7} {'p90':>7}   {'median':>7} {'p90':>7}   "
                   f"{'coverage':>8}")
        section = None
        for line in s["lines"]:
            if line["section"] != section:
                section = line["section"]
                if section:
                    out.append(f"  {section}")
            label = ("  " if section else "") + line["label"]
            o, i = line["out_of_source"], line["in_sample"]
            out.append(f"  {label[:44]:44} {line['sources']:>7} {line['rows']:>5}   {_pct(o['median']):>7} "
                       f"{_pct(o['p90']):>7}   {_pct(i['median']):>7} {_pct(i['p90']):>7}   "
                       f"{_pct(line['coverage_90']):>8}")
        out += _agreement_lines(s["agreement"])
        if rows:
            out.append("  rows (out-of-source prediction):")
            for c in v.out_of_source:
                flag = f"  [extrapolated: {', '.join(c.extrapolated)}]" if c.extrapolated else ""
                out.append(f"    {c.row:<52} {c.metric:<21} {c.measured:>11,.3f} {c.predicted:>11,.3f} "
                           f"{c.error:>+7.1%}  {c.config}{flag}")
            out.append("  rows the model cannot express:")
            out += [f"    {row} [{src}]: {why}" for row, src, why in v.skipped]
        out.append("")
    return "\n".join(out)


def csv(validations: list[Validation]) -> str:
    lines = ["kind,id,source,regime,metric,measured,predicted_in_sample,predicted_out_of_source,"
             "error_out_of_source,extrapolated"]
    for v in validations:
        ins = {(c.row, c.metric): c.predicted for c in v.in_sample}
        for c in v.out_of_source:
            lines.append(f"{v.kind},{c.row},{c.source},\"{c.regime}\",{c.metric},{c.measured:.6g},"
                         f"{ins.get((c.row, c.metric), float('nan')):.6g},{c.predicted:.6g},{c.error:.4f},"
                         f"\"{'; '.join(c.extrapolated)}\"")
    return "\n".join(lines) + "\n"


def to_json(validations: list[Validation]) -> str:
    data = {v.kind: {**summary(v),
                     "rows": [{"id": c.row, "source": c.source, "regime": c.regime, "metric": c.metric,
                               "measured": c.measured, "predicted": c.predicted, "error": c.error,
                               "extrapolated": list(c.extrapolated), "config": c.config} for c in v.out_of_source],
                     "skipped": [{"id": r, "source": s, "reason": why} for r, s, why in v.skipped]}
            for v in validations}
    return json.dumps(data, indent=2, sort_keys=True, default=lambda x: None) + "\n"
