"""One self-contained HTML report a buyer can read offline: the recommendation, the bill of
materials, the cost breakdown, the sweep chart (a PNG embedded as a data URI) and frontier,
the per-GPU explain table, the re-checks and the assumptions. No script, font or stylesheet
is fetched: everything is inline, so the file opens anywhere and prints cleanly.
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from optimizer.report import acquire
from optimizer.report.tco import break_even_lines, price_lines
from optimizer.report.text import plan_lines
from optimizer.tradeoffs.explain import NEAR, STEP, WIDE, Explanation, near_ties, relaxation_lines
from optimizer.tradeoffs.sweep import SweepResult

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2em auto;max-width:1100px;
color:#1d2330;line-height:1.45;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;border-bottom:2px solid #dde3ee;padding-bottom:.2em;
margin-top:1.8em}
.lead{color:#4a5468}.card{background:#f3f6fb;border-left:5px solid #3b6fc4;padding:.8em 1.1em;margin:1em 0}
.big{font-size:1.35em;font-weight:600}table{border-collapse:collapse;width:100%;font-size:.9em;margin:.5em 0}
th,td{border-bottom:1px solid #e3e7ef;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#f7f9fc}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.best td{background:#eaf6ea;font-weight:600}.bar{background:#3b6fc4;height:.8em;display:inline-block}
.muted{color:#6b7488;font-size:.85em}img{max-width:100%;border:1px solid #e3e7ef}
pre{background:#f7f9fc;padding:.8em;overflow-x:auto;font-size:.8em}
"""


def _money(x: float) -> str:
    return f"${x:,.0f}"


def _table(head: list[str], rows: list[list[str]], numeric: frozenset[int] | set[int] = frozenset(),
           classes: list[str] | None = None) -> str:
    out = ["<table><thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        cells = "".join(f'<td class="n">{escape(c)}</td>' if j in numeric else f"<td>{escape(c)}</td>"
                        for j, c in enumerate(row))
        out.append(f"<tr{cls}>{cells}</tr>")
    return "".join(out) + "</tbody></table>"


def _headline(s: dict[str, Any]) -> str:
    p, plan, cost = s["problem"], s["plan"], s["cost"]
    if p["kind"] == "serve":
        what = "Serve with " + ", ".join(f"{r['replicas']} × {r['tp'] * r['pp']} {r['gpu']}"
                                  + (f" (rented: {r['offer']})" if r.get("offer") else "") + f" for {r['class']}"
                                  for r in plan["replicas"])
        speed = (f"{sum(c['capacity_output_tokens_per_s'] for c in plan['classes']):,.0f} output tokens/s of "
                 f"capacity; ${cost['usd_per_million_output_tokens']:,.3f} per million output tokens")
        gpu = ", ".join(plan["gpu_types"])
    else:
        net = plan["fabric"] or "one server"
        what = f"{acquire(plan)} ({net})"
        speed = (f"{plan['days']:,.1f} days to train (90 % band {plan['days_band_90'][0]:,.1f}–"
                 f"{plan['days_band_90'][1]:,.1f}) at {plan['tokens_per_s']:,.0f} tokens/s, MFU {plan['mfu']:.0%}")
        gpu = plan["gpu"]
    return (f'<div class="card"><div class="muted">Recommended GPU</div><div class="big" id="gpu">{escape(gpu)}</div>'
            f"<p>{escape(what)}.</p><p>{escape(speed)}.</p>"
            f'<p>Total cost of ownership over {cost["horizon_years"]:g} years: <span class="big" id="total">'
            f"{_money(cost['tco_usd'])}</span> (capex {_money(cost['capex_usd'])}, electricity "
            f"{_money(cost['opex_usd_per_year'])}/year); IT power {cost['it_power_kw']:,.1f} kW.</p></div>")


def _bom(s: dict[str, Any]) -> str:
    rows = [[r["category"], r["sku"], r["description"], str(r["quantity"]), _money(r["unit_price_usd"]),
             _money(r["extended_price_usd"]), f"{r['power_w'] / 1e3:,.2f} kW", r["source"]] for r in s["bom"]]
    rows.append(["total", "", "", "", "", _money(sum(r["extended_price_usd"] for r in s["bom"])),
                 f"{sum(r['power_w'] for r in s['bom']) / 1e3:,.2f} kW", ""])
    return _table(["category", "sku", "description", "qty", "unit", "extended", "power", "source"], rows,
                  {3, 4, 5, 6})


def _breakdown(s: dict[str, Any]) -> str:
    cost = s["cost"]
    parts = {k: v for k, v in cost["capex_parts_usd"].items() if v}
    years = f"({cost['horizon_years']:g} years)"
    for name in ("rent", "electricity", "colocation", "maintenance"):
        if cost[f"{name}_usd"]:
            parts[f"{name} {years}" if name != "rent" else name] = cost[f"{name}_usd"]
    total = sum(parts.values()) or 1.0
    rows = "".join(f"<tr><td>{escape(k)}</td><td class=\"n\">{_money(v)}</td><td class=\"n\">{v / total:.1%}</td>"
                   f'<td style="width:50%"><span class="bar" style="width:{100 * v / total:.1f}%"></span></td></tr>'
                   for k, v in parts.items())
    return (f"<table><thead><tr><th>category</th><th>USD</th><th>share</th><th></th></tr></thead><tbody>{rows}"
            f'<tr><td><b>TCO</b></td><td class="n"><b>{_money(total)}</b></td><td></td><td></td></tr>'
            "</tbody></table>")


def _sweep(result: SweepResult, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    axis = ", ".join(f"{a.column} {a.show(min(a.values))}–{a.show(max(a.values))}" for a in result.axes)
    frontier = [r for r in result.rows if r.pareto]
    serve = result.problem.serving is not None
    rows = [[", ".join(a.show(v) for a, v in zip(result.axes, r.values, strict=True)), r.gpu, str(r.gpus), r.plan,
             f"{r.tokens_per_s:,.0f}" if serve else f"{r.days:,.1f}", _money(result.cost(r))]
            for r in sorted(frontier, key=result.cost)]
    check = ("Checked: relaxing the swept limit never made the optimum worse." if not result.violations
             else "Monotonicity violated (a bug): " + "; ".join(result.violations))
    return (f"<p>{len(result.rows)} points ({escape(axis)}), each re-solved over {result.candidates} shared "
            f"candidate plans. {escape(check)}</p>"
            f'<img alt="sweep chart" src="data:image/png;base64,{data}">'
            f"<h3>Pareto frontier ({escape(result.cost_name)} against {'capacity' if serve else 'time'})</h3>"
            + _table([", ".join(a.column for a in result.axes), "gpu", "gpus", "plan",
                      "output tokens/s" if serve else "days", result.cost_name],
                     rows, {2, 4, 5}))


def _explain(e: Explanation) -> str:
    serve = e.problem.serving is not None
    rows, classes = [], []
    for o in e.options:
        if o.row is not None:
            speed = "" if serve else f"{o.row.days:,.1f} days"
            rows.append([o.gpu, str(o.row.gpus), o.row.plan, speed, _money(o.row.capex), _money(o.row.tco),
                         f"{o.row.power_kw:,.1f} kW", "the optimum" if o.outcome == "optimum" else ""])
        else:
            rows.append([o.gpu, "", "", "", "", "", "", o.reason])
        classes.append("best" if o.outcome == "optimum" else "")
    table = _table(["gpu", "gpus", "plan", "time", "capex", "TCO", "power", "note"], rows, {1, 4, 5, 6}, classes)
    limits = relaxation_lines(e)
    relax = ("<ul>" + "".join(f"<li>{escape(x)}</li>" for x in limits) + "</ul>") if limits else ""
    return table + (f"<h3>Limits at the optimum, each relaxed by {STEP:.0%}</h3>{relax}" if relax else "")


def _items(lines: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ul>"


def render_html(s: dict[str, Any], sweep: SweepResult | None, sweep_png: bytes | None,
                explanation: Explanation | None) -> str:
    """The report as one HTML string (deterministic for the same inputs)."""
    p = s["problem"]
    sections = [f"<h1>gpuopt: {escape(p['name'])}</h1>",
                f'<p class="lead">{escape(p["model"])}, objective {escape(p["objective"])}'
                + (f", budget {_money(p['budget_usd'])} ({escape(p['budget_covers'])})" if p["budget_usd"] else "")
                + (f", deadline {p['deadline_days']:,.1f} days" if p["deadline_days"] else "")
                + (f", power cap {p['power_cap_kw']:,.1f} kW" if p["power_cap_kw"] else "")
                + f". Solver {escape(s['solver']['backend'])}: {escape(s['status'])}, gap "
                + ("n/a" if s["gap"] is None else f"{s['gap']:.1e}") + ".</p>",
                _headline(s), "<h2>The plan</h2>", _items(plan_lines(s)),
                "<h2>Bill of materials</h2>", _bom(s),
                "<h2>Cost breakdown</h2>", _breakdown(s)]
    if s["break_even"] or s.get("no_rental_offer"):
        lines = break_even_lines(s["break_even"], s["cost"]["horizon_years"], s.get("no_rental_offer", []))
        sections += ["<h2>Buy or rent</h2>", _items(lines)]
    sections += ["<h2>Prices used</h2>", _items(price_lines(s["prices_used"]))]
    if sweep is not None and sweep_png is not None:
        sections += ["<h2>Trade-offs: what more or less would buy</h2>", _sweep(sweep, sweep_png)]
    if explanation is not None:
        ties = near_ties(explanation)
        if ties:
            sections += [f"<h2>Near-ties: within {NEAR:.0%} of the optimum, or {WIDE:.0%} for a {WIDE:.0%} saving</h2>",
                         "<ul>" + "".join(f"<li>{escape(t)}</li>" for t in ties) + "</ul>"]
        sections += ["<h2>Every GPU type on its own</h2>", _explain(explanation)]
    sections += ["<h2>Re-checked without the solver</h2>",
                 "<ul>" + "".join(f"<li>{escape(c)}</li>" for c in s["verification"]) + "</ul>",
                 "<h2>Assumptions</h2>",
                 f"<p>Prices as of {escape(s['cost']['prices_as_of'])}; electricity "
                 f"${s['cost']['electricity_usd_per_kwh']:g}/kWh, PUE {s['cost']['pue']:g}, load factor "
                 f"{s['cost']['load_factor']:g}. Bill-of-materials sources marked ASSUMPTION have no published "
                 "price: get a quote.</p>",
                 "<ul>" + "".join(f"<li>{escape(a)}</li>" for a in s["assumptions"]) + "</ul>",
                 '<p class="muted">Made by gpuopt. Every figure is re-checked by its performance model; the 90 % '
                 "band comes from the model's error on published runs.</p>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>gpuopt report: {escape(p['name'])}</title><style>{CSS}</style></head><body>"
            + "\n".join(sections) + "</body></html>\n")
