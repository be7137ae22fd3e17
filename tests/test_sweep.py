"""Sweeps: axes parse, N points give N rows, the frontier is monotone on shipped problems, the
monotonicity check can fail, CSVs are byte-identical with any number of workers, charts are PNG."""

from __future__ import annotations

import csv
import io
from dataclasses import replace

import pytest
from click.testing import CliRunner

from optimizer.cli import main
from optimizer.errors import ProblemError
from optimizer.problem import load_problem
from optimizer.recommend import recommend
from optimizer.tradeoffs.axes import Axis, loosest, parse_axes, parse_values
from optimizer.tradeoffs.sweep import SweepRow, mark_pareto, monotonicity_violations, run_sweep, to_csv
from tests.conftest import ROOT, TINY

MIN_TIME = TINY.replace("objective: min_cost\ndeadline_days: 30", "objective: min_time\nbudget: {usd: 400k}")


def _problem(tmp_path, catalog, text=TINY):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return load_problem(path, catalog)


def test_parse_values():
    assert parse_values("budget", "100k:2M:20", _q) == pytest.approx([100e3 * (i + 1) for i in range(20)])
    assert parse_values("budget", "250k,1M", _q) == (250e3, 1e6)
    assert parse_values("budget", "5", _q) == (5.0,)
    for bad in ("1:2", "a:b:3", "1:2:0", "x"):
        with pytest.raises(ProblemError, match="START:STOP:COUNT"):
            parse_values("budget", bad, _q)


def _q(text: str) -> float:
    from optimizer.validation import parse_quantity

    return parse_quantity(text)


def test_axes_are_checked_against_the_problem(tmp_path, catalog):
    p = _problem(tmp_path, catalog, MIN_TIME)
    with pytest.raises(ProblemError, match="minimises time under a budget"):
        parse_axes(p, catalog, None, "10:20:3", None, None, None, ())
    with pytest.raises(ProblemError, match="training problem"):
        parse_axes(p, catalog, None, None, None, None, "1k:2k:2", ())
    with pytest.raises(ProblemError, match="Did you mean 'h100-sxm'"):
        parse_axes(p, catalog, None, None, None, None, None, ("h100-sxn=-30%",))
    with pytest.raises(ProblemError, match="nothing to sweep"):
        parse_axes(p, catalog, None, None, None, None, None, ())
    axes = parse_axes(p, catalog, "100k:400k:4", None, None, "20,40", None, ("l40s=-30%,0%",))
    assert [a.column for a in axes] == ["budget_usd", "power_kw", "price:l40s"]
    wide, wide_catalog = loosest(p, catalog, axes)  # the table must contain every point's
    assert wide.budget_usd == 400e3 and wide.power_cap_w == 40e3
    assert wide_catalog.gpus["l40s"].price.usd == pytest.approx(catalog.gpus["l40s"].price.usd * 0.7)


def test_n_points_give_n_rows_and_a_monotone_frontier(tmp_path, catalog):
    p = _problem(tmp_path, catalog, MIN_TIME)
    axes = [Axis("budget", (50e3, 100e3, 200e3, 400e3, 800e3)), Axis("power", (20.0, 200.0))]
    result = run_sweep(p, catalog, axes, "ortools", 30, workers=1)
    assert len(result.rows) == 10 and [r.index for r in result.rows] == list(range(10))
    assert result.violations == ()
    for power in (20.0, 200.0):  # more budget never slower
        days = [r.days for r in result.rows if r.values[1] == power and r.feasible]
        assert days == sorted(days, reverse=True) and len(days) >= 3
    frontier = sorted((r for r in result.rows if r.pareto), key=result.cost)
    assert frontier and all(a.days > b.days for a, b in zip(frontier, frontier[1:], strict=False))
    # a point equals the standalone solve of that point
    row = next(r for r in result.rows if r.values == (400e3, 200.0))
    rec = recommend(replace(p, budget_usd=400e3, power_cap_w=200e3), catalog)
    assert row.capex == pytest.approx(rec.solution.capex) and row.days == pytest.approx(rec.days, rel=1e-3)


def test_a_violation_is_detected(tmp_path, catalog):
    """The check can fail: a larger budget with a slower optimum is reported."""
    p = _problem(tmp_path, catalog, MIN_TIME)
    axes = [Axis("budget", (1e5, 2e5))]
    rows = (SweepRow(0, (1e5,), "optimal", objective=1000.0, days=10.0, capex=9e4),
            SweepRow(1, (2e5,), "optimal", objective=900.0, days=11.0, capex=1.5e5))
    from optimizer.tradeoffs.sweep import SweepResult

    result = mark_pareto(SweepResult(p, axes, rows, 1, ()))
    assert [r.pareto for r in result.rows] == [True, False]
    violations = monotonicity_violations(result)
    assert len(violations) == 1 and "made the optimum worse" in violations[0]
    infeasible_after = SweepResult(p, axes, (rows[0], SweepRow(1, (2e5,), "infeasible")), 1, ())
    assert monotonicity_violations(infeasible_after)


def test_shipped_problems_sweep_monotone(catalog):
    cases = [("lab_budget", [Axis("budget", (150e3, 300e3, 500e3, 900e3))]),
             ("llama2_70b_serving", [Axis("demand", (2e3, 5e3, 10e3, 20e3))]),
             ("chat_and_batch_serving", [Axis("power", (5.0, 15.0, 120.0))])]
    for name, axes in cases:
        problem = load_problem(ROOT / "problems" / f"{name}.yaml", catalog)
        result = run_sweep(problem, catalog, axes, "ortools", 60, workers=2)
        assert result.violations == (), (name, result.violations)
        assert len(result.rows) == len(axes[0].values)
        costs = [result.cost(r) for r in result.rows if r.feasible]
        if problem.serving and axes[0].name == "demand":
            assert costs == sorted(costs)  # more demand never cheaper
        if name == "lab_budget":
            row = next(r for r in result.rows if r.values == (500e3,))
            assert row.gpu == "gaudi3" and row.gpus == 16 and row.capex == pytest.approx(419_400)


def test_price_scenarios_move_the_optimum(tmp_path, catalog):
    p = _problem(tmp_path, catalog)
    axes = parse_axes(p, catalog, None, None, None, None, None, ("l40s=-40%,0%,+100%",))
    result = run_sweep(p, catalog, axes, "ortools", 30, workers=1)
    tcos = [r.tco for r in result.rows]
    assert result.violations == () and tcos == sorted(tcos) and tcos[0] < tcos[-1]


def test_csv_is_deterministic_with_any_workers(tmp_path, catalog):
    p = _problem(tmp_path, catalog)
    axes = [Axis("deadline", (5.0, 10.0, 20.0, 40.0)), Axis("tokens", (10e9, 40e9))]
    texts = [to_csv(run_sweep(p, catalog, axes, "ortools", 30, workers=w)) for w in (1, 2, 2)]
    assert texts[0] == texts[1] == texts[2]
    rows = list(csv.DictReader(io.StringIO(texts[0])))
    assert len(rows) == 8 and {"deadline_days", "tokens", "gpu", "tco_usd", "pareto"} <= set(rows[0])


def test_cli_sweep_writes_csv_and_png(tmp_path, tiny_problem):
    out_csv, out_png = tmp_path / "s.csv", tmp_path / "s.png"
    r = CliRunner().invoke(main, ["sweep", str(tiny_problem), "--deadline", "5:20:4", "--csv", str(out_csv),
                                  "--plot", str(out_png), "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert "Pareto frontier" in r.output and "Monotonicity checked" in r.output
    assert len(out_csv.read_text().splitlines()) == 5
    png = out_png.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    again = tmp_path / "t.png"
    CliRunner().invoke(main, ["sweep", str(tiny_problem), "--deadline", "5:20:4", "--plot", str(again),
                              "--workers", "1"])
    assert again.read_bytes() == png  # the chart is deterministic too


def test_cli_sweep_bad_input_exits_2(tiny_problem):
    for args, text in ((["--budget", "1:2"], "START:STOP:COUNT"), (["--price", "h100-sxm"], "ID=CHANGE"),
                       (["--deadline", "5:20:4", "--plot", "x.jpg"], "PNG"), ([], "nothing to sweep"),
                       (["--price", "nosuch=-10%"], "no GPU, server, NIC, switch, cable or cloud offer")):
        r = CliRunner().invoke(main, ["sweep", str(tiny_problem), *args])
        assert r.exit_code == 2 and text in r.output and "Traceback" not in r.output, (args, r.output)


def test_unwritable_outputs_exit_2_without_a_traceback(tmp_path, tiny_problem):
    missing = tmp_path / "no" / "such"
    for args in (["sweep", str(tiny_problem), "--deadline", "10", "--workers", "1", "--csv", str(missing / "s.csv")],
                 ["sweep", str(tiny_problem), "--deadline", "10", "--workers", "1", "--plot", str(missing / "s.png")],
                 ["solve", str(tiny_problem), "--bom", str(missing / "bom.csv")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "cannot write" in r.output and "Traceback" not in r.output, r.output


def test_cost_columns_add_up_to_the_tco_rent_and_maintenance_included(catalog):
    """Issue 15, item 9: the sweep's cost columns (and the chart's stacked bars) hold every term of
    a point's TCO: a rented answer's rent, a bought one's maintenance, each summing to the TCO."""
    from optimizer.tradeoffs.sweep import COST_CATEGORIES

    problem = load_problem(ROOT / "problems" / "rent_or_buy_pretrain.yaml", catalog)
    axes = parse_axes(problem, catalog, None, "8,10", None, None, None, ())
    rented = run_sweep(problem, catalog, axes, "ortools", 60, workers=1)
    bought = run_sweep(replace(problem, offers=()), catalog, axes, "ortools", 60, workers=1)
    for result, term in ((rented, "rent"), (bought, "maintenance")):
        for r in result.rows:
            costs = dict(r.costs)
            assert set(costs) <= set(COST_CATEGORIES) and costs.get(term, 0) > 0, (term, costs)
            assert sum(costs.values()) == pytest.approx(r.tco, rel=1e-9)
