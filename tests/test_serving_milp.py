"""Serving in the MIP: replica counts of several types, equal to brute force; mixes where cheaper."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from optimizer.cli import main
from optimizer.milp import Status, Targets, group_costs, purchase, solve
from optimizer.perf.serve import ServePlan
from optimizer.plans import Group, PlanTable, ServeCandidate
from optimizer.problem import load_problem
from optimizer.recommend import recommend

ROOT = Path(__file__).resolve().parent.parent


def random_serving(rng: random.Random) -> tuple[PlanTable, Targets]:
    groups: dict[str, Group] = {}
    cands: list[ServeCandidate] = []
    classes = ["a", "b"][: rng.randint(1, 2)]
    for gi in range(rng.randint(1, 3)):
        slots = rng.choice([2, 4, 8])
        g = Group(f"gpu{gi}", f"srv{gi}", None, slots, rng.random() < 0.4, rng.uniform(1e3, 3e4),
                  rng.uniform(1e3, 4e4), rng.uniform(70, 700), rng.uniform(200, 3000), 0, 0.0, 0.0, 0, 0.0, 0.0,
                  "serve")
        groups[g.key] = g
        for ci in range(rng.randint(1, 3)):
            size = rng.choice([s for s in (1, 2, 4, 8) if s <= slots])
            plan = ServePlan(tp=size, batch=rng.randint(1, 64))
            cands.append(ServeCandidate(f"{g.key}/c{ci}", g.key, rng.choice(classes), plan,
                                        rng.uniform(200, 5000) * size, 0.1, 0.05, 10.0))
    demands = tuple((k, rng.uniform(500, 12000)) for k in classes)
    targets = Targets("min_cost", 0.0, None, rng.choice([None, rng.uniform(5e4, 5e5)]), rng.choice(["capex", "tco"]),
                      rng.choice([None, rng.uniform(2e3, 4e4)]), rng.uniform(0, 8), demands)
    return PlanTable((), groups, serving=tuple(cands)), targets


def brute_force(table: PlanTable, t: Targets) -> float | None:
    """Every combination of replica counts up to what one type alone would need."""
    from optimizer.milp import replica_bound

    ranges = [range(replica_bound(r, t) + 1) for r in table.serving]
    best = None
    for counts in itertools.product(*ranges):
        supply: dict[str, float] = {}
        used: dict[str, int] = {}
        for r, n in zip(table.serving, counts, strict=True):
            supply[r.demand] = supply.get(r.demand, 0.0) + r.tokens_per_s * n
            used[r.group] = used.get(r.group, 0) + r.gpus_per_replica * n
        if any(supply.get(k, 0.0) < d for k, d in t.demands):
            continue
        capex = value = power = 0.0
        for h, gpus in used.items():
            p = purchase(table.groups[h], gpus)
            c, v, w = group_costs(table.groups[h], p)
            capex, value, power = capex + c, value + v, power + w
        tco = capex + t.opex_usd_per_w * power + t.maintenance * value
        if t.power_cap_w is not None and power > t.power_cap_w:
            continue
        if t.budget_usd is not None and (tco if t.budget_covers == "tco" else capex) > t.budget_usd:
            continue
        best = tco if best is None else min(best, tco)
    return best


def _small(table: PlanTable, t: Targets) -> bool:
    from optimizer.milp import replica_bound

    return math.prod(replica_bound(r, t) + 1 for r in table.serving) <= 20_000


SEEDS = [s for s in range(400) if _small(*random_serving(random.Random(s)))][:200]


def test_enough_small_instances():
    assert len(SEEDS) == 200


@pytest.mark.parametrize("seed", SEEDS)
def test_serving_mip_equals_brute_force(seed):
    table, targets = random_serving(random.Random(seed))
    expected = brute_force(table, targets)
    sol = solve(table, targets, "ortools", 20, 0.0)
    if expected is None:
        assert sol.status == Status.INFEASIBLE, seed
        return
    assert sol.status == Status.OPTIMAL, seed
    assert math.isclose(sol.objective, expected, rel_tol=1e-6), (seed, sol.objective, expected)
    assert math.isclose(sol.tco, expected, rel_tol=1e-6), seed


@pytest.mark.parametrize("seed", SEEDS[::10])
def test_serving_pulp_equals_brute_force(seed):
    table, targets = random_serving(random.Random(seed))
    expected = brute_force(table, targets)
    sol = solve(table, targets, "pulp", 20, 0.0)
    if expected is None:
        assert sol.status == Status.INFEASIBLE
    else:
        assert math.isclose(sol.objective, expected, rel_tol=1e-6)


def test_some_random_optima_mix_gpu_types():
    mixed = 0
    for seed in SEEDS:
        table, targets = random_serving(random.Random(seed))
        sol = solve(table, targets, "ortools", 20, 0.0)
        if sol.status == Status.OPTIMAL and len({table.groups[p.group].gpu for p in sol.purchases}) > 1:
            mixed += 1
    assert mixed >= 5


def test_seed_problem_takes_the_cheaper_machine_and_never_costs_more_than_either_alone(catalog):
    """On the shipped seed comparison (Llama-2 70B fp16 at 10k output tokens/s, TPOT 100 ms) the
    optimum may mix both machines; with the calibrated vLLM overheads (its API server's time per
    streamed token included) an 8-card rig of 4090s without peer-to-peer serves about 500 tokens/s
    at the TPOT limit against about 2,170 for four H100s, so the H100 servers carry most of the
    load. Four H100 replicas fall some 13 % short of the demand, and whether 4090 rigs top them up
    (three, today) or a fifth H100 replica is bought or rented, and so which machine alone is the
    dearer (the 4090s, $1.01M against $1.11M, since a fifth H100 replica is rented for three
    years), are knife edges each refit may move: the test checks what holds on either side."""
    tco, share = {}, 0.0
    for name in ("llama2_70b_serving", "llama2_70b_serving_h100", "llama2_70b_serving_4090"):
        rec = recommend(load_problem(ROOT / "problems" / f"{name}.yaml", catalog), catalog)
        tco[name] = rec.solution.tco
        if name == "llama2_70b_serving":
            rates = {gpu: 0.0 for gpu in ("h100-sxm", "rtx-4090")}
            for r, count in rec.solution.replicas:
                rates[rec.table.groups[r.group].gpu] += r.tokens_per_s * count
            share = rates["h100-sxm"] / sum(rates.values())
    assert tco["llama2_70b_serving"] <= min(tco["llama2_70b_serving_h100"], tco["llama2_70b_serving_4090"]) + 1e-6
    assert share > 0.8  # the H100 servers serve most of it
    if share < 1.0:  # a mix is bought only where it is cheaper than either machine alone
        assert tco["llama2_70b_serving"] < min(tco["llama2_70b_serving_h100"], tco["llama2_70b_serving_4090"])


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return str(path)


SERVE = """\
schema_version: 1
name: s
workload:
  kind: serve
  model: llama3-8b
  classes:
    - {name: chat, input_len: 512, output_len: 128, output_tokens_per_s: 5000, tpot_ms: 50}
objective: min_cost
hardware: {allow_gpus: [l40s, a100-sxm-80gb]}
"""


def test_serving_problem_solves_and_reports(tmp_path):
    r = CliRunner().invoke(main, ["solve", _write(tmp_path, SERVE), "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["plan"]["replicas"] and data["cost"]["usd_per_million_output_tokens"] > 0
    assert data["plan"]["classes"][0]["capacity_output_tokens_per_s"] >= 5000
    assert all(rep["tpot_ms"] <= 50 for rep in data["plan"]["replicas"])


def test_unreachable_latency_says_latency(tmp_path):
    r = CliRunner().invoke(main, ["solve", _write(tmp_path, SERVE.replace("tpot_ms: 50", "tpot_ms: 0.5"))])
    assert r.exit_code == 1, r.output
    assert "latency: even one chat request at a time misses its limit" in r.output


def test_model_too_big_says_memory(tmp_path):
    text = SERVE.replace("llama3-8b", "llama3-405b").replace("[l40s, a100-sxm-80gb]", "[l4]")
    r = CliRunner().invoke(main, ["solve", _write(tmp_path, text)])
    assert r.exit_code == 1 and "l4: memory: needs" in r.output


def test_budget_too_small_says_budget(tmp_path):
    text = SERVE.replace("objective: min_cost", "objective: min_cost\nbudget: {usd: 30k}")
    r = CliRunner().invoke(main, ["solve", _write(tmp_path, text)])
    assert r.exit_code == 1, r.output
    assert "budget: the least " in r.output


def test_serving_problem_validation(tmp_path):
    bad = SERVE.replace("output_tokens_per_s: 5000", "output_tokens_per_s: 5000, requests_per_s: 3")
    r = CliRunner().invoke(main, ["solve", _write(tmp_path, bad)])
    assert r.exit_code == 2 and "exactly one of output_tokens_per_s and requests_per_s" in r.output
    r = CliRunner().invoke(main, ["solve", _write(tmp_path, SERVE.replace("input_len", "inptu_len"))])
    assert r.exit_code == 2 and "Did you mean 'input_len'?" in r.output
    r = CliRunner().invoke(main, ["solve", _write(tmp_path, SERVE.replace("min_cost", "min_time"))])
    assert r.exit_code == 2 and "minimum cost" in r.output


def test_estimate_serve_json_keys():
    r = CliRunner().invoke(main, ["estimate", "serve", "--model", "llama2-70b", "--gpu", "h100-sxm", "--gpus", "16",
                                  "--tp", "8", "--input-len", "512", "--output-len", "256", "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    for key in ("fits", "max_batch", "memory_gb_per_gpu", "ttft_ms", "tpot_ms", "output_tokens_per_s",
                "total_tokens_per_s"):
        assert key in out
    assert out["replicas"] == 2 and out["batch_per_replica"] == out["max_batch"]  # saturated by default
    assert out["total_tokens_per_s"] == pytest.approx(out["output_tokens_per_s"] * (512 + 256) / 256)
    one = CliRunner().invoke(main, ["estimate", "serve", "--model", "llama2-70b", "--gpu", "h100-sxm", "--gpus", "8",
                                    "--tp", "8", "--input-len", "512", "--output-len", "256", "--batch", "1",
                                    "--format", "json"])
    assert json.loads(one.output)["tpot_ms"] < out["tpot_ms"]
    r = CliRunner().invoke(main, ["estimate", "serve", "--model", "llama2-70b", "--gpu", "h100-sxm", "--gpus", "8",
                                  "--input-len", "1", "--output-len", "1", "--batch", "2", "--concurrency", "3"])
    assert r.exit_code == 2 and "not both" in r.output


DEEPSEEK_ON_H200 = """schema_version: 1
name: deepseek-r1-serving
description: "DeepSeek-R1 (fp8) at 20k output tokens/s on H200"
workload:
  kind: serve
  model: deepseek-r1
  precisions: [fp8]
  kv_precision: fp8
  classes:
    - {name: chat, input_len: 1000, output_len: 1000, output_tokens_per_s: 20k, ttft_ms: 5000, tpot_ms: 100}
objective: min_cost
hardware:
  allow_gpus: [h200-sxm]
search:
  tp: [4, 8]
  pp: [1]
"""


def test_moe_serving_considers_attention_data_parallelism(catalog, tmp_path):
    """An MoE model's replicas are tried with attention data-parallel over the TP group too; for
    DeepSeek-R1 (MLA: under TP every GPU keeps every sequence's latent cache) it is the cheaper
    layout, and the answer says so. A dense model never gets such candidates."""
    path = tmp_path / "dsr1.yaml"
    path.write_text(DEEPSEEK_ON_H200)
    rec = recommend(load_problem(path, catalog), catalog)
    assert any(c.plan.attention_dp for c in rec.table.serving)
    assert all(r.plan.attention_dp for r, _ in rec.solution.replicas)
    out = json.loads(CliRunner().invoke(main, ["solve", str(path), "--format", "json"]).output)
    assert all(r["attention_dp"] for r in out["plan"]["replicas"])
    text = CliRunner().invoke(main, ["solve", str(path)]).output
    assert "(TP=8 PP=1 attention data-parallel, fp8 weights" in text or "(TP=4 PP=1 attention data-parallel" in text
    dense = recommend(load_problem(ROOT / "problems" / "llama2_70b_serving_h100.yaml", catalog), catalog)
    assert not any(c.plan.attention_dp for c in dense.table.serving)


def test_an_offline_request_class_is_served_without_an_api_server(tmp_path):
    """`offline: true` on a request class (a batch job handed to the engine directly) plans its
    replicas without the API server's time per step, says so, and never needs more capacity
    than the same demand through a server."""
    runs = {}
    for offline in (False, True):
        text = SERVE.replace("output_tokens_per_s: 5000, tpot_ms: 50}",
                             f"output_tokens_per_s: 50000, offline: {str(offline).lower()}}}")
        r = CliRunner().invoke(main, ["solve", _write(tmp_path, text), "--format", "json"])
        assert r.exit_code == 0, r.output
        runs[offline] = json.loads(r.output)
    assert runs[True]["problem"]["demands"][0]["offline"] and not runs[False]["problem"]["demands"][0]["offline"]
    assert runs[True]["cost"]["capex_usd"] <= runs[False]["cost"]["capex_usd"]
    each = {k: max(rep["output_tokens_per_s_each"] for rep in v["plan"]["replicas"]) for k, v in runs.items()}
    assert each[True] > each[False]
    offline = SERVE.replace("tpot_ms: 50}", "tpot_ms: 50, offline: true}")
    text = CliRunner().invoke(main, ["solve", _write(tmp_path, offline)])
    assert "an offline batch (no API server)" in text.output
