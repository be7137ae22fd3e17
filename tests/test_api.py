"""The Python API (`import optimizer as go`): what the CLI calls, equal to what it prints."""

from __future__ import annotations

import ast
import json
import re
import sys

import pytest
import yaml
from click.testing import CliRunner

import optimizer as go
from optimizer import api
from optimizer.cli import main
from optimizer.problem import load_problem as load_unpriced
from tests.conftest import ROOT


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_surface_is_documented_and_resolves():
    assert go.__all__ == api.__all__
    for name in go.__all__:
        obj = getattr(go, name)
        assert obj is getattr(api, name)
        assert (obj.__doc__ or "").strip(), f"go.{name} has no docstring"
    for name in ("recommend", "explain", "sweep", "compare", "report"):  # functions, not the stage modules
        assert callable(getattr(go, name)), name


def test_readme_notebook_example_runs(at_root, capsys):
    code = re.search(r"## Python API.*?```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "'sense': 'maximise tokens/s'" in out and "extended_price_usd" in out
    assert "Did you mean 'h100-sxm'" in out


@pytest.mark.parametrize("name", ["lab_quotes", "owned_inventory_serving"])
def test_recommend_equals_the_cli_json(name, at_root, catalog):
    """The API's objective is the one `gpuopt solve --format json` prints (the stored snapshot of
    that output), and so is everything else. (lab_budget takes the same path; its snapshot is
    checked in test_problems, where its plans are enumerated once.)"""
    answer = go.recommend(go.load_problem(f"problems/{name}.yaml", catalog))
    stored = (ROOT / "tests" / "snapshots" / f"solve_{name}.json").read_text()
    printed = json.loads(stored)
    assert answer.to_dict()["objective"] == printed["objective"]
    assert answer.to_dict() == printed
    assert answer.objective == printed["objective"]["value"]
    assert answer.render("json") == stored
    assert answer.render("markdown") == (ROOT / "tests" / "snapshots" / f"solve_{name}.md").read_text()


def test_price_book_is_applied_by_the_api_as_by_the_cli(at_root, tmp_path, catalog):
    """lab_quotes limited to l40s: the quoted L40S price must be what the API plans with (the old
    load_problem + recommend path priced the catalog's and bought fewer GPUs for more money)."""
    data = yaml.safe_load((ROOT / "problems" / "lab_quotes.yaml").read_text())
    data["hardware"]["allow_gpus"] = ["l40s"]
    path = tmp_path / "l40s_quotes.yaml"
    path.write_text(yaml.safe_dump(data))
    printed = json.loads(_cli("solve", str(path), "--format", "json"))
    from_file = go.recommend(go.load_problem(path, catalog)).to_dict()
    from_dict = go.recommend(go.problem_from_dict(data, catalog)).to_dict()
    unpriced = go.recommend(load_unpriced(path, catalog)).to_dict()  # priced on the way in
    for result in (from_file, from_dict, unpriced):
        assert result["objective"] == printed["objective"]
        assert result["plan"]["gpus"] == printed["plan"]["gpus"]
        assert result["cost"]["capex_usd"] == pytest.approx(printed["cost"]["capex_usd"])
    assert any(p["override"] for p in printed["prices_used"])


def test_estimates_equal_the_cli(catalog):
    train = go.estimate_train("llama2-7b", "a100-sxm-80gb", 16, catalog, tp=2, tokens="100B")
    printed = _cli("estimate", "train", "--model", "llama2-7b", "--gpu", "a100-sxm-80gb", "--gpus", "16",
                   "--tp", "2", "--tokens", "100B", "--format", "json")
    assert train.render("json") == printed and train.to_dict() == json.loads(printed)
    serve = go.estimate_serve("llama2-70b", "h100-sxm", 8, 512, 256, catalog, tp=8, batch=16)
    printed = _cli("estimate", "serve", "--model", "llama2-70b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "8",
                   "--input-len", "512", "--output-len", "256", "--batch", "16")
    assert serve.render() == printed


def test_tables_come_as_frames(at_root, catalog):
    problem = go.load_problem("problems/rent_or_buy_pretrain.yaml", catalog)
    plans = go.plan(problem)
    frame = plans.to_frame()
    assert len(frame) == len(plans.table.candidates) > 0
    assert {"gpu", "plan", "dp_min", "dp_max", "tokens_per_s_per_replica"} <= set(frame.columns)
    grid = go.sweep(problem, deadline=[20, 40])
    points = grid.to_frame()
    assert list(points["deadline_days"]) == [20, 40] and points["tco_usd"].dtype.kind == "f"
    assert grid.render("csv") == _cli("sweep", "problems/rent_or_buy_pretrain.yaml", "--deadline", "20,40",
                                      "--workers", "1", "--format", "csv")
    explained = go.explain(problem, plans=plans)
    assert explained.feasible and len(explained.to_frame()) == len(explained.to_dict()["gpus"]) > 3
    solution = go.solve(problem, plans)
    assert solution.objective == pytest.approx(go.recommend(problem, plans=plans).objective, rel=1e-9)
    checks = go.validate("training", catalog=catalog).to_frame()
    assert len(checks) > 300 and {"measured", "predicted_in_sample", "source"} <= set(checks.columns)


def test_validate_names_its_choices_on_a_wrong_argument(catalog):
    with pytest.raises(go.ProblemError, match="kind is 'training', 'serving' or 'both'"):
        go.validate("trainig", catalog=catalog)
    with pytest.raises(go.ProblemError, match="cv is 'none' or 'source'"):
        go.validate(cv="sources", catalog=catalog)


@pytest.mark.parametrize("limit", [0, 0.5, -5.0, 86_401, float("nan"), float("inf"), True])
def test_a_time_limit_out_of_range_is_refused_by_every_solving_call(tiny_problem, catalog, limit, monkeypatch):
    """An API caller's time limit is checked as the problem file's solver.time_limit_s is (a second,
    which both backends run at least, to a day), before any plan is enumerated; 0 is not read as
    'the file's limit', nor True as one second."""
    problem = go.load_problem(tiny_problem, catalog)

    def enumerated(*args, **kwargs):
        raise AssertionError("plans were enumerated before the time limit was checked")

    for module, name in [("optimizer.recommend", "plan_table"), ("optimizer.api", "plan_table"),
                         ("optimizer.tradeoffs.explain", "enumerate_candidates")]:
        monkeypatch.setattr(sys.modules[module], name, enumerated)  # the package's `recommend` is the API's
    calls = [lambda: go.recommend(problem, time_limit_s=limit), lambda: go.solve(problem, time_limit_s=limit),
             lambda: go.explain(problem, time_limit_s=limit),
             lambda: go.sweep(problem, budget="1M", time_limit_s=limit),
             lambda: go.report(problem, sweep_points=0, time_limit_s=limit)]
    for call in calls:
        with pytest.raises(go.ProblemError, match=r"seconds from 1 to 86,400 \(a day\)"):
            call()


def test_an_api_time_limit_is_the_one_the_answer_reports(tiny_problem, catalog):
    problem = go.load_problem(tiny_problem, catalog)
    assert problem.solver.time_limit_s == 30
    assert go.recommend(problem, time_limit_s=9).to_dict()["solver"]["time_limit_s"] == 9.0
    assert go.recommend(problem).to_dict()["solver"]["time_limit_s"] == 30.0
    for bound in (1, 86_400):  # the range's ends are in it
        assert problem.with_time_limit(bound).solver.time_limit_s == bound


def test_a_result_refuses_a_format_it_has_no_rendering_for(at_root, catalog):
    grid = go.sweep(go.load_problem("problems/llama2_70b_serving.yaml", catalog), demand="5k")
    with pytest.raises(go.ProblemError, match="text, csv, json"):
        go.render(grid, "markdown")


def test_the_cli_uses_only_the_api():
    """optimizer/cli/ imports nothing of gpuopt but optimizer.api and its own modules (click and the
    standard library aside): every command is a call of the Python API."""
    for path in sorted((ROOT / "optimizer" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            for name in modules:
                if name.startswith("optimizer.") and not name.startswith(("optimizer.api", "optimizer.cli")):
                    raise AssertionError(f"cli/{path.name} imports {name}")


def test_training_precision_and_recompute_are_closed_sets():
    """The plan's precision and recomputation are Literal types; text from outside (the API, data)
    is checked into them, and an unknown value names the choices."""
    from optimizer.perf.specs import PRECISIONS, RECOMPUTE_MODES, as_precision, as_recompute

    assert PRECISIONS == ("bf16", "fp16", "fp8", "fp4") and RECOMPUTE_MODES == ("none", "selective", "full")
    assert as_precision("fp8") == "fp8" and as_recompute("full") == "full"
    with pytest.raises(go.ProblemError, match="unknown training precision 'fp32': one of bf16, fp16, fp8, fp4"):
        go.estimate_train("llama2-7b", "h100-sxm", 8, precision="fp32")
    with pytest.raises(go.ProblemError, match="unknown recomputation 'some': one of none, selective, full"):
        go.estimate_train("llama2-7b", "h100-sxm", 8, recompute="some")


def test_workloads_are_typed(at_root):
    """One workload is a tuple of one named ""; several keep their names and windows (issue 14)."""
    lab = go.load_problem("problems/lab_budget.yaml")
    assert isinstance(lab.workload, go.TrainWorkload) and lab.workload.name == "" and lab.training is lab.workload
    several = go.load_problem("problems/pretrain_finetune_serve.yaml")
    assert [type(w) for w in several.workloads] == [go.TrainWorkload] * 2 + [go.ServeWorkload] * 2
    assert several.training is None and several.serving is None
    with pytest.raises(go.ProblemError, match="one workload"):
        _ = several.workload
    serve = several.alone(several.workloads[2])
    assert serve.serving is not None and serve.serving.name == "" and serve.horizon_years < several.horizon_years
