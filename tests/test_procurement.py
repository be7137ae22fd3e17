"""Issue 6: buying, renting and owning; facility limits; TCO terms; price books. Each feature
moves the optimum where it should, and every printed term adds up."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from optimizer.catalog import with_used_prices
from optimizer.cli import main
from optimizer.errors import InfeasibleError, ProblemError
from optimizer.milp import group_costs, least_purchases
from optimizer.plans import enumerate_candidates
from optimizer.problem import load_priced, load_problem, problem_from_data
from optimizer.recommend import recommend
from optimizer.report import summary
from optimizer.report.tco import cost_terms
from optimizer.report.text import render_text

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ROOT / "problems"


def _data(name: str) -> dict:
    return yaml.safe_load((PROBLEMS / name).read_text())


def _solve(data: dict, catalog, name: str = "test.yaml"):
    problem = problem_from_data(data, PROBLEMS / name, catalog)
    return recommend(problem, catalog)


def _kinds(rec) -> set[str]:
    return {"rent" if rec.table.groups[p.group].rented else "buy" for p in rec.solution.purchases}


# --- buy versus rent ---------------------------------------------------------------------------

def test_renting_wins_a_short_horizon_and_buying_a_long_one(catalog):
    data = _data("buy_or_rent_serving.yaml")
    short = _solve({**data, "cost": {"horizon_years": 0.25}}, catalog)
    long = _solve({**data, "cost": {"horizon_years": 3}}, catalog)
    assert _kinds(short) == {"rent"} and short.solution.capex == 0 and short.solution.rent > 0
    # three years buy at least one whole 8-GPU server and rent less than three months do (whether
    # the remainder is rented or a second server bought turns on a few percent of a replica's
    # throughput: test_a_remainder_that_would_leave_a_server_part_empty_is_rented pins that case)
    assert _gpus(long)["buy"] >= 8 and _gpus(long)["rent"] < _gpus(short)["rent"]
    # the break-even utilisation says the same: above 100 % for the short horizon, below for the long one
    assert summary(short, catalog)["break_even"][0]["break_even_utilisation"] > 1
    assert any(row["chosen"] == "buy" for row in summary(long, catalog)["break_even"])


def test_a_remainder_that_would_leave_a_server_part_empty_is_rented(catalog):
    """At 7,500 tokens/s a third H100 replica and the A100 remainder would each take a whole server
    of their own to buy: over three years the answer buys one server and rents the rest, and every
    break-even row agrees with the choice made, busy the whole horizon (a rented row compares the
    GPUs rented with the whole server buying them would take)."""
    data = _data("buy_or_rent_serving.yaml")
    data["workload"]["classes"][0]["output_tokens_per_s"] = 7500
    mixed = _solve({**data, "cost": {"horizon_years": 3}}, catalog)
    gpus = _gpus(mixed)
    assert gpus["buy"] > 0 and gpus["rent"] > 0, gpus
    rented = 0.0
    for row in summary(mixed, catalog)["break_even"]:
        u = row["break_even_utilisation"]
        assert (u is not None and u < 1) if row["chosen"] == "buy" else (u is None or u >= 1), row
        if row["chosen"] == "rent":
            rented += row["rent_full_use_usd"]
            assert row["buy_gpus"] == 8 and row["gpus"] < row["buy_gpus"]
    assert rented > 0 and rented == pytest.approx(mixed.solution.rent, rel=1e-6)


def _gpus(rec) -> dict[str, int]:
    """GPUs bought and rented in an answer."""
    return {k: sum(b.gpus for b in rec.solution.purchases if rec.table.groups[b.group].rented == (k == "rent"))
            for k in ("buy", "rent")}


def test_renting_is_never_dearer_than_buying_alone(catalog):
    """Allowing rent only adds options: the optimum can only fall."""
    data = _data("buy_or_rent_serving.yaml")
    for years in (0.25, 1, 3):
        both = _solve({**data, "cost": {"horizon_years": years}}, catalog).solution.tco
        buy = _solve({**data, "cost": {"horizon_years": years}, "procurement": {"buy": True, "rent": False}},
                     catalog).solution.tco
        assert both <= buy * (1 + 1e-9), years


def test_one_pretraining_run_rents_by_the_gpu_hour(catalog):
    data = _data("rent_or_buy_pretrain.yaml")
    rec = _solve(data, catalog)
    g = rec.table.groups[rec.solution.candidate.group]
    assert g.rented and g.rent_hours == 0  # on demand: billed the job's GPU-hours
    offer = catalog.offers[g.offer]
    gpu_hours = rec.solution.counts.gpus * rec.days * 24
    # the bill is the re-checked job's GPU-hours at the offer's rate, within the plan's band pessimism
    assert rec.solution.rent == pytest.approx(gpu_hours * offer.price.usd, rel=0.02)
    assert rec.days <= 10
    bought = _solve({**data, "procurement": {"buy": True, "rent": False}}, catalog)
    assert bought.solution.tco > rec.solution.tco
    row = summary(bought, catalog)["break_even"][0]
    assert row["this_job_utilisation"] < row["break_even_utilisation"]  # one job cannot pay for the cluster


def test_a_committed_term_bills_every_hour_of_the_term(catalog):
    data = _data("rent_or_buy_pretrain.yaml")
    data = {**data, "hardware": {"allow_gpus": ["a100-sxm-40gb"], "max_gpus": 512},
            "procurement": {"buy": False, "rent": True, "offers": ["aws-p4d-a100-1yr"]}}
    rec = _solve(data, catalog)
    gpus = rec.solution.counts.gpus
    assert rec.solution.rent == pytest.approx(gpus * 8766 * catalog.offers["aws-p4d-a100-1yr"].price.usd)


# --- owned inventory -----------------------------------------------------------------------------

def test_owned_gpus_are_used_before_buying(catalog):
    data = _data("owned_inventory_serving.yaml")
    rec = _solve(data, catalog)
    owned = {rec.table.groups[p.group].gpu: p.owned_gpus for p in rec.solution.purchases}
    # every owned A100 and 3090 serves; the 2080 Ti towers serve as far as their power and maintenance
    # pay for themselves against bought 3090s, in replicas of two or four cards (how many of the twelve
    # moves with the fitted rates: 8 before the refit of 2026-12-08, 10 after it)
    assert owned["a100-sxm-80gb"] == 8 and owned["rtx-3090"] == 5
    assert owned["rtx-2080-ti"] in range(2, 12, 2)  # not all twelve: the last pair does not pay for itself
    bought = sum(p.gpus - p.owned_gpus for p in rec.solution.purchases)
    assert bought > 0  # the demand needs more than the inventory: buy only what is missing
    without = _solve({k: v for k, v in data.items() if k != "inventory"}, catalog)
    assert without.solution.capex > rec.solution.capex + 50_000
    # owned hardware is free to buy but not to run: its power and maintenance are in the TCO
    cost = cost_terms(rec, catalog)
    assert cost["maintenance_usd"] > rec.solution.capex * 0.06 * 3


def test_owned_hardware_is_accounted_for(catalog, tmp_path):
    """Every inventory line says how many owned GPUs the answer uses; idle ones say why, in numbers:
    running them (cards, and the owned towers left empty) over the horizon, and what they alone
    would serve, at $0 capex. At $0.30/kWh the old 2080 Tis cost more to run than new 3090s."""
    data = _data("owned_inventory_serving.yaml")
    data["site"]["electricity_usd_per_kwh"] = 0.30
    path = tmp_path / "dear_power.yaml"
    path.write_text(yaml.safe_dump(data))
    rec = _solve(data, catalog)
    rows = {r["gpu"]: r for r in summary(rec, catalog)["owned"]}
    assert rows["a100-sxm-80gb"]["idle"] == 0
    assert all(r["used"] + r["idle"] == r["owned"] for r in rows.values())
    ti = rows["rtx-2080-ti"]
    assert ti["owned"] == 12 and ti["used"] + ti["idle"] == 12 and ti["idle"] > 0
    p = rec.problem
    gpu, tower = catalog.gpus["rtx-2080-ti"], catalog.servers["desktop-4"]
    towers = ti["idle"] // tower.slots
    watts = ti["idle"] * gpu.tdp_w + towers * tower.base_power_w
    per_watt = p.load_factor * p.pue * p.horizon_years * 8766 * p.electricity_usd_per_kwh / 1000
    upkeep = p.maintenance_per_year * p.horizon_years * (ti["idle"] * gpu.price.usd + towers * tower.price.usd)
    assert ti["running_cost_usd"] == pytest.approx(watts * per_watt + upkeep)
    # the replica type that makes the most of the idle cards
    alone = max(ti["idle"] // r.gpus_per_replica * r.tokens_per_s
                for r in rec.table.serving if rec.table.groups[r.group].gpu == "rtx-2080-ti")
    assert ti["alone_output_tokens_per_s"] == pytest.approx(alone) and alone > 0
    text = CliRunner().invoke(main, ["solve", str(path)]).output
    assert "Owned hardware" in text and f"{ti['idle']} idle: running them would cost" in text


def test_idle_owned_gpus_say_what_they_would_do_for_the_training_jobs_too(catalog):
    """With serving and training workloads, idle owned GPUs are weighed against each training job as
    well: how many days they alone would take with its fastest plan on them, against its window."""
    rec = _solve(_data("pretrain_finetune_serve.yaml"), catalog)
    a100 = next(r for r in summary(rec, catalog)["owned"] if r["gpu"] == "a100-sxm-80gb")
    assert a100["idle"] == 8 and {t["workload"] for t in a100["alone_training"]} == {"pretrain", "finetune"}
    pool = next(o.pool for o in rec.problem.inventory if o.gpu == "a100-sxm-80gb")
    for t in a100["alone_training"]:
        w = next(x for x in rec.problem.workloads if x.name == t["workload"])
        rate = max(min(c.dp_max, 8 // c.gpus_per_replica) * c.replica_tokens_per_s for c in rec.table.candidates
                   if c.workload == w.name and rec.table.groups[c.group].pool == pool
                   and c.dp_min <= 8 // c.gpus_per_replica)
        assert t["days"] == pytest.approx(w.tokens / rate / 86400) and t["deadline_days"] == w.deadline_s / 86400
    assert "alone they would train pretrain in" in a100["why"] and "-day window" in a100["why"]


def test_owned_cards_too_few_for_a_replica_say_so(catalog):
    """Three owned 2080 Tis cannot make the smallest replica the search allows (TP=4): the account
    says so, with what keeping them would cost, instead of '0 replicas'."""
    data = {"schema_version": 1, "name": "lone-cards", "objective": "min_cost", "site": {"datacenter": False},
            "workload": {"kind": "serve", "model": "llama2-13b", "precisions": ["fp16"],
                         "classes": [{"name": "chat", "input_len": 512, "output_len": 256,
                                      "output_tokens_per_s": 5000, "ttft_ms": 2000, "tpot_ms": 60}]},
            "inventory": [{"gpu": "rtx-2080-ti", "count": 3, "server": "desktop-4", "servers": 1}],
            "hardware": {"allow_gpus": ["rtx-4090"]}, "search": {"tp": [4], "pp": [1]}}
    rec = _solve(data, catalog)
    (row,) = summary(rec, catalog)["owned"]
    assert row["idle"] == 3 and row["alone_replicas"] == 0 and row["smallest_replica_gpus"] == 4
    assert row["why"].startswith("too few for one replica (the smallest that meets the targets takes 4 GPUs)")
    assert f"${row['running_cost_usd']:,.0f}" in row["why"]


def test_training_buys_only_what_the_owned_server_lacks(catalog, tiny_problem):
    data = yaml.safe_load(tiny_problem.read_text())
    data["hardware"] = {"allow_gpus": ["a100-sxm-80gb"], "max_gpus": 64, "exclude_fabrics": ["eth-25g-1"]}
    data["deadline_days"] = 6
    plain = _solve(data, catalog)
    need = plain.solution.counts.gpus
    assert need > 8
    data["inventory"] = [{"gpu": "a100-sxm-80gb", "count": 8, "server": "hgx-ampere-8"}]
    rec = _solve(data, catalog)
    counts = rec.solution.counts
    assert counts.owned_gpus == 8 and counts.owned_servers == 1
    g = rec.table.groups[rec.solution.candidate.group]
    # exactly the same hardware bought outright, less one owned server of eight GPUs
    full = group_costs(g, replace(counts, owned_gpus=0, owned_servers=0))[0]
    assert rec.solution.capex == pytest.approx(full - 8 * g.gpu_usd - g.server_usd)
    assert rec.solution.capex < plain.solution.capex


def test_loose_cards_are_shared_out_between_server_types(catalog):
    """Loose owned cards fit several server types; the re-check shares the pool between the groups
    that use it instead of giving each group all of it."""
    problem = problem_from_data({**_data("owned_inventory_serving.yaml"),
                                 "inventory": [{"gpu": "rtx-3090", "count": 6}]}, PROBLEMS / "t.yaml", catalog)
    table = enumerate_candidates(problem, catalog)
    groups = sorted(h for h, g in table.groups.items() if g.pool == "owned:rtx-3090:loose")
    assert len(groups) == 2  # desktop-4 and rig-8-consumer
    need = least_purchases(table, {groups[0]: 4, groups[1]: 8})
    assert sum(n.owned_gpus for n in need) == 6 and [n.owned_servers for n in need] == [0, 0]
    rec = recommend(problem, catalog, table=table)  # verify() re-prices with the pool shared out
    assert sum(p.owned_gpus for p in rec.solution.purchases) == 6


def test_owned_gpus_may_be_used_where_they_may_no_longer_be_bought(catalog, tiny_problem):
    data = yaml.safe_load(tiny_problem.read_text())
    data["hardware"] = {"allow_gpus": ["a100-sxm-80gb", "h20"], "max_gpus": 64}
    data["site"] = {"datacenter": True, "region": "export-controlled-2023"}
    data["deadline_days"] = 60
    data["inventory"] = [{"gpu": "a100-sxm-80gb", "count": 8, "server": "hgx-ampere-8"}]
    rec = _solve(data, catalog)
    for p in rec.solution.purchases:
        g = rec.table.groups[p.group]
        if g.gpu == "a100-sxm-80gb":
            assert p.gpus == p.owned_gpus  # never bought in this region
        else:
            assert g.gpu == "h20"


# --- facility limits -----------------------------------------------------------------------------

def test_a_tight_power_cap_moves_to_a_more_efficient_gpu(catalog):
    data = _data("lab_quotes.yaml")
    data = {**data, "budget": {"usd": "300k", "covers": "capex"}, "prices": {},
            "hardware": {"allow_gpus": ["rtx-4090", "h100-pcie", "rtx-6000-ada", "l40s"]}}
    loose = _solve({**data, "site": {"datacenter": False, "power_cap_kw": 100}}, catalog)
    tight = _solve({**data, "site": {"datacenter": False, "power_cap_kw": 8}}, catalog)

    def per_kw(rec):
        return rec.perf.tokens_per_s / (rec.solution.power_w / 1e3)

    def gpu(rec):
        return rec.table.groups[rec.solution.candidate.group].gpu

    assert gpu(loose) != gpu(tight)
    assert per_kw(tight) > per_kw(loose)
    assert tight.solution.power_w <= 8000


def test_export_region_vendor_list_racks_and_stock_bind(catalog):
    rec = recommend(load_problem(PROBLEMS / "export_controlled_racks.yaml", catalog), catalog)
    gpu = rec.table.groups[rec.solution.candidate.group].gpu
    assert gpu in catalog.regions["export-controlled"].allowed_gpus
    assert rec.solution.costs.racks <= 4
    bought = {rec.table.groups[p.group].gpu: p.gpus for p in rec.solution.purchases}
    assert bought.get("h800-sxm", 0) <= 16
    assert all(catalog.gpus[rec.table.groups[p.group].gpu].vendor != "AMD" for p in rec.solution.purchases)
    # more racks can only help, and lifting the H800 stock limit too changes the choice
    data = _data("export_controlled_racks.yaml")
    roomy = {**data, "site": {**data["site"], "racks": {"count": 12, "cooling": "air"}},
             "hardware": {"exclude_vendors": ["AMD"]}}
    more = _solve(roomy, catalog)
    assert more.solution.tco <= rec.solution.tco * (1 + 1e-9)
    assert more.table.groups[more.solution.candidate.group].gpu != gpu


def test_racks_by_power_height_and_price(catalog, tiny_problem):
    data = yaml.safe_load(tiny_problem.read_text())
    data["hardware"] = {"allow_gpus": ["a100-sxm-80gb"], "max_gpus": 64}
    data["site"] = {"datacenter": True, "racks": {"cooling": "air", "usd_per_rack": 5000}}
    rec = _solve(data, catalog)
    costs = rec.solution.costs
    assert costs.racks >= math.ceil(costs.power_w / 20e3) and costs.new_racks == costs.racks
    assert cost_terms(rec, catalog)["capex_parts_usd"]["racks"] == 5000 * costs.racks
    # a server that draws more than a rack takes is ruled out, with the reason
    data["site"]["racks"] = {"kw_per_rack": 5}
    with pytest.raises(InfeasibleError) as err:
        _solve(data, catalog)
    assert "racks: one hgx-ampere-8 server draws 6.5 kW, a rack takes 5.0 kW" in str(err.value)


def test_racks_take_whole_servers(catalog, tiny_problem):
    """Four 20 kW racks hold four 14 kW B200 servers, not five: pooled, their 80 kW would take 71 kW of
    servers, but a server is not split across racks (Group.per_rack). The solver and the closed-form
    re-check count racks alike, and a fifth server takes a fifth rack."""
    from optimizer.milp import GroupCount, racks_needed
    from optimizer.plans import build_groups

    data = yaml.safe_load(tiny_problem.read_text())
    data["hardware"] = {"allow_gpus": ["b200"], "max_gpus": 64}
    data["site"] = {"datacenter": True, "racks": {"cooling": "air", "count": 4}}
    problem = problem_from_data(data, tiny_problem, catalog)
    g = next(g for g in build_groups(problem, catalog, "b200") if not g.rented and g.slots == 8)
    assert 10e3 < g.server_power_w <= 20e3 and g.per_rack(20e3, 42) == 1
    racks = problem.racks
    assert racks is not None
    assert racks_needed(racks, {g.key: g}, (GroupCount(g.key, 32, 4, 0, 0),)) == 4
    assert racks_needed(racks, {g.key: g}, (GroupCount(g.key, 40, 5, 0, 0),)) == 5  # pooled power: 4
    rec = _solve(data, catalog)
    assert rec.solution.costs.racks <= 4 and rec.solution.counts.servers <= 4


def test_vendor_allow_list_keeps_only_that_vendor(catalog, tiny_problem):
    data = yaml.safe_load(tiny_problem.read_text())
    data["hardware"] = {"allow_vendors": ["AMD"], "max_gpus": 64}
    problem = problem_from_data(data, tiny_problem, catalog)
    assert problem.gpus and all(catalog.gpus[g].vendor == "AMD" for g in problem.gpus)


# --- TCO terms ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["buy_or_rent_serving.yaml", "owned_inventory_serving.yaml",
                                  "export_controlled_racks.yaml"])
def test_printed_terms_add_up_to_the_solver_objective(name, catalog):
    problem, priced = load_priced(PROBLEMS / name, catalog)
    rec = recommend(problem, priced)
    cost = cost_terms(rec, priced)
    terms = (cost["capex_usd"] + cost["rent_usd"] + cost["electricity_usd"] + cost["colocation_usd"]
             + cost["maintenance_usd"])
    assert terms == pytest.approx(cost["tco_usd"]) == pytest.approx(rec.solution.tco)
    assert rec.solution.objective == pytest.approx(rec.solution.tco, rel=1e-6)
    assert sum(cost["capex_parts_usd"].values()) == pytest.approx(cost["capex_usd"])
    years = problem.horizon_years
    colocation = cost["it_power_kw"] * problem.colocation_usd_per_kw_month * 12 * years
    assert cost["colocation_usd"] == pytest.approx(colocation)
    assert cost["depreciation_usd"] == pytest.approx(cost["capex_usd"] * min(1, years / 5))
    text = CliRunner().invoke(main, ["solve", str(PROBLEMS / name)]).output
    for term in ("capex", "rent", "electricity", "colocation", "maintenance", "TCO", "Depreciation"):
        assert term in text, term


# --- price books ---------------------------------------------------------------------------------

def test_price_book_and_cli_override_catalog_prices(catalog):
    problem, priced = load_priced(PROBLEMS / "lab_quotes.yaml", catalog)
    assert priced.gpus["l40s"].price.usd == 5400 and priced.gpus["l40s"].price.override
    assert priced.gpus["h100-pcie"].price.usd == pytest.approx(catalog.gpus["h100-pcie"].price.usd * 0.88)
    assert catalog.gpus["l40s"].price.usd != 5400  # the shared catalog is untouched
    book = problem_from_data({**_data("lab_quotes.yaml"), "prices": {"l40s": "6.5k"}}, PROBLEMS / "q.yaml", catalog)
    assert book.prices[0].usd == 6500  # the book reads '6.5k' as --price does
    _, cli = load_priced(PROBLEMS / "lab_quotes.yaml", catalog, ("l40s=6k", "rtx-6000-ada=+50%"))
    assert cli.gpus["l40s"].price.usd == 6000  # the command line wins over the book
    assert cli.gpus["rtx-6000-ada"].price.usd == pytest.approx(catalog.gpus["rtx-6000-ada"].price.usd * 1.5)


def test_a_price_change_moves_the_optimum_and_is_reported():
    runner = CliRunner()
    base = runner.invoke(main, ["solve", str(PROBLEMS / "lab_quotes.yaml")])
    dear = runner.invoke(main, ["solve", str(PROBLEMS / "lab_quotes.yaml"), "--price", "l40s=+40%"])
    assert base.exit_code == dear.exit_code == 0
    assert "Buy 48 x l40s" in base.output and "l40s" not in dear.output.split("Bill of")[0]
    assert "gpu l40s: $5,400.00 [2026-10-14] (override) reseller quote Q-2026-117" in base.output
    assert "- h100-pcie: $21,560.00 [2026-10] (override; not in this answer) academic discount" in base.output
    # the command line wins over the book, and applies to the catalog price
    assert "l40s: $11,200.00 [undated] (override; not in this answer) --price l40s=+40% (catalog $8,000.00)" \
        in dear.output


# --- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("patch, words", [
    ({"site": {"region": "chna"}}, ["site.region", "unknown region 'chna'"]),
    ({"procurement": {"rent": True, "offers": ["aws-p5"]}}, ["procurement.offers", "aws-p5-h100"]),
    ({"procurement": {"rent": False, "offers": ["aws-p5-h100"]}}, ["rent' is false"]),
    ({"inventory": [{"gpu": "rtx-3090", "count": 4, "server": "hgx-ampere-8"}]}, ["does not take 'rtx-3090'"]),
    ({"inventory": [{"gpu": "rtx-3090", "count": 9, "server": "desktop-4", "servers": 2}]}, ["raise 'servers'"]),
    ({"inventory": [{"gpu": "rtx-309", "count": 4}]}, ["inventory[0].gpu", "rtx-3090"]),
    ({"hardware": {"max_units": {"h100-sx": 4}}}, ["max_units", "h100-sxm"]),
    ({"hardware": {"exclude_vendors": ["Nvidia"]}}, ["unknown vendor 'Nvidia'", "NVIDIA"]),
    ({"prices": {"l40s": "cheap"}}, ["prices.l40s", "-15%"]),
    ({"prices": {"l40": 100}}, ["prices.l40", "l40s"]),
    ({"prices": {"l40s": -5}}, ["prices.l40s", "negative"]),
    ({"procurement": {"buy": False, "rent": False}}, ["nothing can be used"]),
    ({"site": {"floor_m2": 1}}, ["site.floor_m2"]),
])
def test_bad_procurement_input_names_the_field(patch, words, catalog, tiny_problem):
    data = {**yaml.safe_load(tiny_problem.read_text()), **patch}
    with pytest.raises(ProblemError) as err:
        problem_from_data(data, tiny_problem, catalog)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_bad_cli_price_exits_2(tiny_problem):
    for spec, text in (("h100-sxm", "ID=PRICE"), ("h100-sxm=x%", "-20%"), ("nosuch=1", "cloud offer 'nosuch'")):
        r = CliRunner().invoke(main, ["solve", str(tiny_problem), "--price", spec])
        assert r.exit_code == 2 and text in r.output and "Traceback" not in r.output, (spec, r.output)


def test_procurement_output_is_deterministic():
    runner = CliRunner()
    first = runner.invoke(main, ["solve", str(PROBLEMS / "owned_inventory_serving.yaml"), "--format", "json"])
    second = runner.invoke(main, ["solve", str(PROBLEMS / "owned_inventory_serving.yaml"), "--format", "json"])
    assert first.exit_code == 0 and first.output == second.output


def test_problem_without_rent_or_inventory_is_unchanged(catalog, tiny_problem):
    """Issue 6 adds options; a problem that uses none of them buys as before."""
    problem = load_problem(tiny_problem, catalog)
    assert problem.offers == () and problem.inventory == () and problem.racks is None
    assert problem.buy_gpus == problem.gpus and problem.prices == ()


def test_training_plans_keep_the_memory_headroom(catalog):
    """No training plan uses more than the GPU's memory less the headroom (default 10 %, from the
    catalog; a problem may set its own). lab_quotes' 48 GB plan used 47.4 GB with no headroom; it
    now stays within 90 % of the card's 48 GiB (less 1/16 for ECC on the L40S), and the answer
    prints used / usable / total."""
    data = _data("lab_quotes.yaml")
    default = _solve(data, catalog)
    assert default.problem.memory_headroom == pytest.approx(catalog.efficiency.memory_headroom) == pytest.approx(0.1)
    total = 48 * 2**30  # the catalog's prices: the 48 GiB RTX 6000 Ada (the quotes pick the L40S, below)
    assert default.perf.memory.total <= total * 0.9 and default.perf.memory_capacity == pytest.approx(total * 0.9)
    plan = summary(default, catalog)["plan"]
    assert plan["memory_usable_gb_per_gpu"] == pytest.approx(total * 0.9 / 1e9)
    assert plan["memory_total_gb_per_gpu"] == pytest.approx(total / 1e9)
    data["hardware"]["memory_headroom"] = 0.0
    full = _solve(data, catalog)
    assert full.perf.memory.total > total * 0.9  # the old plan, above the default headroom
    assert full.perf.tokens_per_s > default.perf.tokens_per_s  # what the headroom costs
    data["hardware"]["memory_headroom"] = 0.95
    with pytest.raises(ProblemError, match="memory_headroom"):
        _solve(data, catalog)
    text = CliRunner().invoke(main, ["solve", "problems/lab_quotes.yaml"]).output
    assert "Memory per GPU 29.1 of 43.5 GB usable (48.3 GB less 10% headroom)" in text  # L40S: 48 GiB · 15/16


def test_estimate_train_takes_a_memory_headroom():
    runner = CliRunner()
    args = ["estimate", "train", "--model", "llama2-7b", "--gpu", "l40s", "--gpus", "8", "--recompute", "full",
            "--format", "json"]
    default = json.loads(runner.invoke(main, args).output)
    none = json.loads(runner.invoke(main, [*args, "--memory-headroom", "0"]).output)
    l40s = 48 * 2**30 * 15 / 16 / 1e9  # 48 GiB less the 1/16 ECC holds back: 48.3 GB
    assert default["memory_capacity_gb"] == pytest.approx(0.9 * l40s)
    assert none["memory_capacity_gb"] == pytest.approx(l40s)
    assert default["memory_headroom"] == pytest.approx(0.1) and none["memory_total_gb"] == pytest.approx(l40s)
    bad = runner.invoke(main, [*args, "--memory-headroom", "0.95"])
    assert bad.exit_code == 2 and "memory-headroom" in bad.output


def test_training_days_include_failures_and_restarts(catalog, tmp_path):
    """Goodput (Young 1974): a job on N GPUs fails N x 0.000474 times a day (Llama 3's 419
    interruptions on 16,384 H100s in 54 days); each costs a restart and half a checkpoint interval.
    The days include it, on their own line; a problem can set the rate to zero."""
    from optimizer.perf.goodput import Reliability, goodput

    llama3 = goodput(16_384, Reliability(419 / 16_384 / 54, 60.0, 300.0))
    assert llama3.failures_per_day == pytest.approx(419 / 54)
    assert llama3.checkpoint_interval_s / 60 == pytest.approx(19.3, abs=0.1)
    assert 0.85 < llama3.fraction < 0.9  # Meta reports above 90 %: the defaults are a little cautious
    assert goodput(16, Reliability(0.000474)).fraction > 0.99
    assert goodput(10**6, Reliability(0.0)).fraction == 1.0
    data = _data("rent_or_buy_pretrain.yaml")  # 64 rented H100s: one solve takes about a second
    data["procurement"] = {"buy": True, "rent": True, "offers": ["aws-p5-h100"]}  # on demand: no spot reclaims
    rec = _solve(data, catalog)
    g = summary(rec, catalog)["plan"]["goodput"]
    assert g["interruptions_per_gpu_day"] == pytest.approx(0.000474) and g["fraction"] < 0.995
    assert g["interruptions_source"].startswith("Llama 3 Herd of Models (Meta, arXiv 2407.21783)")
    assert rec.days == pytest.approx(g["days_without_failures"] / g["fraction"])
    assert rec.problem.training and rec.days * 86400 <= rec.problem.training.deadline_s
    data["goodput"] = {"interruptions_per_gpu_day": 0}
    ideal = _solve(data, catalog)
    assert summary(ideal, catalog)["plan"]["goodput"]["fraction"] == 1.0
    assert ideal.solution.tco <= rec.solution.tco  # failures cost hardware (or time)
    spot = tmp_path / "spot.yaml"
    spot.write_text(yaml.safe_dump({**_data("rent_or_buy_pretrain.yaml"),
                                    "procurement": {"buy": True, "rent": True, "offers": ["coreweave-h100-spot"]}}))
    text = CliRunner().invoke(main, ["solve", str(spot)]).output
    assert "Goodput 65.8%, included: the job expects 64.03 failures a day" in text  # 64 spot H100s
    assert "and 1 the spot provider reclaiming its capacity (an assumption)" in text
    assert "0.000474 failures, from Llama 3 Herd of Models (Meta, arXiv 2407.21783) section 3.3.4" in text
    data["goodput"] = {"interruptions_per_gpu_day": 0.001}
    assert summary(_solve(data, catalog), catalog)["plan"]["goodput"]["interruptions_source"] == (
        "the problem's goodput")
    data["goodput"] = {"restart_minutes": -1}
    with pytest.raises(ProblemError, match="restart_minutes"):
        _solve(data, catalog)


# --- the rental market (issue 15, item 1) -------------------------------------------------------

RENT_13B = """\
schema_version: 1
name: rent-13b
workload: {kind: train, model: llama2-13b, tokens: 3T, precision: bf16}
objective: min_cost
deadline_days: 60
site: {datacenter: true}
hardware: {allow_gpus: [h100-sxm, b200]}
search: {tp: [1, 2], pp: [1], micro_batch: [1, 2], micro_batches_per_stage: [1, 4], recompute: [none], zero: [1]}
"""


def _cli_solve(tmp_path, text: str):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    r = CliRunner().invoke(main, ["solve", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_a_13b_run_rents_a_multi_node_cluster_at_a_market_price(tmp_path, catalog):
    """13B on 3T tokens in 60 days, renting allowed: a networked cluster from a GPU cloud at a
    market rate (not a hyperscaler's $10-12 on-demand), billed for the job's GPU-hours."""
    out = _cli_solve(tmp_path, RENT_13B + "procurement: {buy: true, rent: true}\n")
    (row,) = [r for r in out["bom"] if r["category"] == "rent"]
    offer = catalog.offers[row["sku"]]
    assert offer.fabric is not None and offer.price.usd < 10 and row["quantity"] > offer.gpus_per_instance
    assert row["quantity"] >= (offer.min_gpus or 1) and offer.price.date.startswith("2026")
    assert out["plan"]["days"] <= 60 and out["cost"]["capex_usd"] == 0


def test_min_cost_without_procurement_compares_buying_and_renting(tmp_path):
    """No procurement section: buying and renting are both open, the answer says which it chose
    and the break-even utilisation; procurement.rent: false asks the buying question alone."""
    both = _cli_solve(tmp_path, RENT_13B)
    bought = _cli_solve(tmp_path, RENT_13B + "procurement: {rent: false}\n")
    assert {r["category"] for r in both["bom"]} == {"rent"} and "rent" not in {r["category"] for r in bought["bom"]}
    assert both["cost"]["tco_usd"] < bought["cost"]["tco_usd"]
    (row,) = both["break_even"]
    assert row["chosen"] == "rent" and row["this_job_utilisation"] < (row["break_even_utilisation"] or 2)


def test_spot_capacity_pays_for_its_reclaims(catalog):
    """A spot offer is billed by use, but its reclaims cost restarts: the job's goodput falls with
    its GPUs at the catalog's reclaim rate, and the same job on demand keeps its goodput."""
    data = _data("rent_or_buy_pretrain.yaml")
    spot = _solve({**data, "procurement": {"buy": False, "rent": True, "offers": ["coreweave-h100-spot"]}}, catalog)
    steady = _solve({**data, "procurement": {"buy": False, "rent": True, "offers": ["coreweave-h100"]}}, catalog)
    rate = catalog.facility.reliability.spot_interruptions_per_gpu_day.value
    gpus = spot.solution.candidate.gpus_per_replica * spot.solution.dp
    assert spot.goodput.failures_per_day == pytest.approx(gpus * (rate + 0.000474), rel=1e-6)
    assert spot.goodput.fraction < 0.8 < 0.99 < steady.goodput.fraction
    s = summary(spot, catalog)
    assert s["plan"]["goodput"]["spot_reclaims_per_gpu_day"] == rate
    assert any(a.startswith("spot reclaims") for a in s["assumptions"])
    # the break-even weighs spot's hours by its goodput: owned GPUs do the same work in fewer hours
    (row,) = s["break_even"]
    slower = steady.goodput.fraction / spot.goodput.fraction
    assert row["rent_hours_per_owned_hour"] == pytest.approx(slower, rel=1e-3) and slower > 1.4
    hours = spot.problem.horizon_years * 8766
    assert row["rent_full_use_usd"] == pytest.approx(gpus * hours * row["usd_per_gpu_hour"] * slower, rel=1e-3)
    assert "of its hours per owned hour for its reclaims" in render_text(s)
    # spot capacity does not serve: a replica that may vanish is no capacity
    serve = _solve({**_data("buy_or_rent_serving.yaml"), "procurement": {"buy": False, "rent": True}}, catalog)
    assert not any(catalog.offers[g.offer].interruptible for g in serve.table.groups.values() if g.rented)


def test_a_capacity_block_caps_the_cluster_and_a_minimum_size_holds(catalog):
    data = _data("rent_or_buy_pretrain.yaml")
    rec = _solve({**data, "procurement": {"buy": False, "rent": True, "offers": ["aws-capacity-block-h100"]}}, catalog)
    offer = catalog.offers["aws-capacity-block-h100"]
    gpus = rec.solution.counts.gpus
    assert offer.min_gpus <= gpus <= offer.max_gpus and gpus % offer.gpus_per_instance == 0
    g = rec.table.groups[rec.solution.candidate.group]
    assert g.rent_hours == pytest.approx(8766 / 12)  # a month's block covers the 10-day deadline
    assert all(c.dp_min * c.gpus_per_replica >= offer.min_gpus for c in rec.table.candidates)


def test_used_hardware_is_bought_at_used_prices_only_where_the_problem_allows_it(tiny_problem, catalog):
    """A GPU's used-market price (catalogs/gpus.yaml used_price, sourced and dated) is what a problem
    with hardware.allow_used: true pays, marked used in the bill of materials, the prices and the
    assumptions; without the flag the new price stands, and where used costs no less, new is bought."""
    text = tiny_problem.read_text().replace("[a100-sxm-80gb, l40s]", "[rtx-a6000]")
    runner = CliRunner()
    tiny_problem.write_text(text)
    new = json.loads(runner.invoke(main, ["solve", str(tiny_problem), "--format", "json"]).output)
    tiny_problem.write_text(text.replace("max_gpus: 64}", "max_gpus: 64, allow_used: true}"))
    used = json.loads(runner.invoke(main, ["solve", str(tiny_problem), "--format", "json"]).output)
    a6000 = catalog.gpus["rtx-a6000"]
    assert a6000.used_price is not None and a6000.used_price.usd < a6000.price.usd
    rows = {"new": new, "used": used}
    gpu_row = {k: next(r for r in v["bom"] if r["category"] == "gpu") for k, v in rows.items()}
    assert gpu_row["new"]["unit_price_usd"] == a6000.price.usd and "(used)" not in gpu_row["new"]["description"]
    assert gpu_row["used"]["unit_price_usd"] == a6000.used_price.usd
    assert gpu_row["used"]["description"].endswith("(used)")
    price = {k: next(r for r in v["prices_used"] if r["id"] == "rtx-a6000") for k, v in rows.items()}
    assert price["new"]["condition"] == "new" and price["used"]["condition"] == "used"
    assert price["used"]["date"] == a6000.used_price.date and price["used"]["source"] == a6000.used_price.source
    assert any("rtx-a6000 bought used" in a for a in used["assumptions"])
    assert not any("bought used" in a for a in new["assumptions"])
    assert used["cost"]["capex_usd"] < new["cost"]["capex_usd"]
    priced = with_used_prices(catalog)
    l40s = catalog.gpus["l40s"]
    assert l40s.used_price is not None and l40s.used_price.usd >= l40s.price.usd
    assert priced.gpus["l40s"].price == l40s.price  # no saving: bought new
    assert priced.gpus["rtx-a6000"].price.condition == "used"


def test_a_gpu_no_longer_sold_new_is_bought_used_or_at_a_quote(tiny_problem, catalog):
    """An end-of-life GPU (sold_new: false: the A100 40GB, the V100) is not bought at its old list
    price: alone it is bad input naming allow_used; beside other GPUs explain says why it is out;
    allow_used buys it at its dated used-market price, and so does a quote in the price book."""
    a100 = catalog.gpus["a100-sxm-40gb"]
    assert not a100.sold_new and a100.used_price is not None and a100.used_price.date >= "2026"
    runner = CliRunner()
    text = tiny_problem.read_text().replace("[a100-sxm-80gb, l40s]", "[a100-sxm-40gb]")
    tiny_problem.write_text(text)
    alone = runner.invoke(main, ["solve", str(tiny_problem)])
    assert alone.exit_code == 2 and "a100-sxm-40gb is no longer sold new" in alone.output
    assert "set hardware.allow_used: true to buy used ones (a100-sxm-40gb $4,300, 2026-07-22)" in alone.output
    tiny_problem.write_text(text.replace("[a100-sxm-40gb]", "[a100-sxm-40gb, l40s]"))
    explained = runner.invoke(main, ["explain", str(tiny_problem)])
    assert explained.exit_code == 0
    assert "end of life: no longer sold new; hardware.allow_used: true buys it used ($4,300, 2026-07-22)" in (
        explained.output)
    tiny_problem.write_text(text.replace("max_gpus: 64}", "max_gpus: 64, allow_used: true}"))
    used = json.loads(runner.invoke(main, ["solve", str(tiny_problem), "--format", "json"]).output)
    row = next(r for r in used["bom"] if r["category"] == "gpu")
    assert row["unit_price_usd"] == a100.used_price.usd and row["description"].endswith("(used)")
    tiny_problem.write_text(text)
    quoted = json.loads(runner.invoke(main, ["solve", str(tiny_problem), "--format", "json",
                                             "--price", "a100-sxm-40gb=5000"]).output)
    assert next(r for r in quoted["bom"] if r["category"] == "gpu")["unit_price_usd"] == 5000
    tiny_problem.write_text(text + "prices: {a100-sxm-40gb: 4800}\n")
    booked = json.loads(runner.invoke(main, ["solve", str(tiny_problem), "--format", "json"]).output)
    assert next(r for r in booked["bom"] if r["category"] == "gpu")["unit_price_usd"] == 4800
    # compare prices it at its used price, and says so
    compared = json.loads(runner.invoke(main, ["compare", "--model", "llama2-7b", "--workload", "train",
                                               "--format", "json"]).output)
    rows = compared["gpus"] if isinstance(compared, dict) else compared
    a100_row = next(r for r in rows if r["gpu"] == "a100-sxm-40gb")
    assert a100_row["gpu_price_usd"] == a100.used_price.usd and a100_row["gpu_price_condition"] == "used"
    assert next(r for r in rows if r["gpu"] == "h100-sxm")["gpu_price_condition"] == "new"


def test_owned_gpus_are_kept_not_bought_in_the_break_even():
    """A group the site already owns has nothing to buy: its line weighs keeping it (maintenance,
    colocation, electricity) against renting; a part-owned group says how many it buys."""
    from optimizer.report.tco import break_even_lines

    row = {"gpu": "a100-sxm-80gb", "gpus": 8, "owned_gpus": 8, "buy_gpus": 8, "server": "hgx", "chosen": "buy",
           "offer": "runpod-a100", "usd_per_gpu_hour": 1.89, "buy_fixed_usd": 30780.0,
           "electricity_full_use_usd": 16731.0, "rent_full_use_usd": 397626.0, "break_even_utilisation": 0.08,
           "this_job_utilisation": None}
    owned, = break_even_lines([row], 3)
    assert owned.startswith("8 x a100-sxm-80gb (owned): keeping them ($30,780 maintenance and colocation")
    assert "keeping them pays off above 8% utilisation" in owned and "buying" not in owned
    part, = break_even_lines([{**row, "owned_gpus": 5}], 3)
    assert part.startswith("8 x a100-sxm-80gb (5 owned, 3 bought): buying ($30,780 capex")


def test_buy_or_rent_names_the_bought_gpus_no_cloud_offer_rents(catalog):
    """lab_budget buys Gaudi 3s, which no on-demand offer in the catalog rents: the answer says so in
    its buy-or-rent section instead of leaving the section out."""
    problem, priced = load_priced(PROBLEMS / "lab_budget.yaml", catalog)
    s = summary(recommend(problem, priced), priced)
    assert s["no_rental_offer"] == ["gaudi3"] and s["break_even"] == []
    text = render_text(s)
    assert "gaudi3: no on-demand cloud offer in the catalog rents it" in text.split("Buy or rent")[1]



# --- end-of-life GPUs and committed terms at the edges (a review of the change) --------------------

EOL_OWNED = """\
schema_version: 1
name: eol-owned
workload: {kind: train, model: qwen2.5-1.5b, tokens: 200B, precision: bf16}
objective: min_cost
deadline_days: 5
site: {datacenter: true}
hardware: {allow_gpus: [a100-sxm-40gb]}
procurement: {rent: false}
inventory:
  - {gpu: a100-sxm-40gb, count: 8, server: hgx-ampere-8}
"""


def test_a_gpu_no_longer_sold_new_is_never_priced_new_in_an_answer(tmp_path, catalog):
    """Only a price in USD buys an end-of-life GPU new (a change of its 2022 price is no quote);
    a change applies to the used price where used is allowed; walls and the break-even price more
    of it used, and name allow_used as the limit."""
    runner = CliRunner()
    path = tmp_path / "eol.yaml"
    path.write_text(EOL_OWNED)
    out = runner.invoke(main, ["solve", str(path)]).output
    assert "a100-sxm-40gb is no longer sold new: more come only used" in out and "(hardware.allow_used)" in out
    used = catalog.gpus["a100-sxm-40gb"].used_price
    path.write_text(EOL_OWNED.replace("inventory:\n  - {gpu: a100-sxm-40gb, count: 8, server: hgx-ampere-8}\n", ""))
    relative = runner.invoke(main, ["solve", str(path), "--price", "a100-sxm-40gb=-20%"])
    assert relative.exit_code == 2 and "no longer sold new" in relative.output
    path.write_text(EOL_OWNED.replace("[a100-sxm-40gb]}", "[a100-sxm-40gb], allow_used: true}"))
    cheaper = json.loads(runner.invoke(main, ["solve", str(path), "--price", "a100-sxm-40gb=-20%", "--format",
                                              "json"]).output)
    row = next(r for r in cheaper["bom"] if r["category"] == "gpu")
    assert row["unit_price_usd"] == pytest.approx(0.8 * used.usd)  # 20 % off the used price, not the 2022 one


def test_renting_a_gpu_no_longer_sold_new_weighs_buying_it_used(catalog):
    data = _data("rent_or_buy_pretrain.yaml")
    data["hardware"]["allow_gpus"] = ["a100-sxm-40gb"]
    rec = _solve({**data, "procurement": {"buy": True, "rent": True, "offers": ["aws-p4d-a100"]}}, catalog)
    (row,) = summary(rec, catalog)["break_even"]
    assert row["chosen"] == "rent" and row["buy_used"]
    assert "vs buying used instead" in render_text(summary(rec, catalog))


def test_the_fastest_cluster_bills_whole_terms_of_the_job_and_keeps_its_walls(tmp_path):
    """Without the deadline a rented month is billed for the whole months the job spans (a 3-month
    job pays 3, not 4), so a budget that covers them still leaves the GPU-count and deadline walls."""
    text = """\
schema_version: 1
name: term
workload: {kind: train, model: llama2-7b, tokens: 1.5T, precision: bf16}
objective: min_cost
deadline_days: 45
budget: {usd: 230k, covers: capex}
site: {datacenter: true}
hardware: {max_gpus: 16}
procurement: {buy: false, rent: true, offers: [aws-capacity-block-h100]}
"""
    path = tmp_path / "term.yaml"
    path.write_text(text)
    r = CliRunner().invoke(main, ["solve", str(path)])
    walls = [line for line in r.output.splitlines() if line.startswith("  - ")]
    assert r.exit_code == 1 and [w.split()[1] for w in walls] == ["GPU", "deadline"], r.output
    assert "the fastest cluster within every limit takes 84.7 days" in walls[1]


def test_a_sweep_price_in_usd_buys_a_gpu_no_longer_sold_new_as_solve_does(tmp_path):
    """sweep --price ID=USD is a quote, as solve --price is: it unlocks an end-of-life GPU; a
    percentage change of its last new price does not."""
    path = tmp_path / "eol.yaml"
    path.write_text(EOL_OWNED.replace("inventory:\n  - {gpu: a100-sxm-40gb, count: 8, server: hgx-ampere-8}\n", "")
                    .replace("[a100-sxm-40gb]}", "[a100-sxm-40gb, l40s]}").replace("deadline_days: 5",
                                                                                  "deadline_days: 30"))
    out = tmp_path / "s.csv"
    for prices, gpus in (("a100-sxm-40gb=1000,2000", {"a100-sxm-40gb"}), ("a100-sxm-40gb=-90%,-80%", {"l40s"})):
        r = CliRunner().invoke(main, ["sweep", str(path), "--price", prices, "--price", "hgx-ampere-8=5000",
                                      "--csv", str(out)])
        assert r.exit_code == 0, r.output
        with open(out) as f:
            assert {row["gpu"] for row in csv.DictReader(f)} == gpus, prices


def test_memory_at_a_capped_gpu_count_names_the_cap_that_binds(tmp_path):
    """70B on RTX 4090s capped at 8 units (no budget, no power cap): the reason names
    hardware.max_units, not an empty limit nor a budget that does not bind."""
    text = """\
schema_version: 1
name: capped
workload: {kind: train, model: llama2-70b, tokens: 100B, precision: bf16}
objective: min_cost
deadline_days: 3650
site: {datacenter: false}
hardware: {allow_gpus: [rtx-4090], max_units: {rtx-4090: 8}}
procurement: {rent: false}
"""
    path = tmp_path / "capped.yaml"
    for extra, names in (("", "hardware.max_units"), ("budget: 100M\n", "hardware.max_units")):
        path.write_text(text + extra)
        out = CliRunner().invoke(main, ["solve", str(path)]).output
        assert f"at most 8 of them within the {names} (" in out and "within the  (" not in out, out
        assert "the budget is the limit" not in out


def test_walls_do_not_charge_for_owned_hardware(tmp_path):
    """512 owned A100s: the budget wall's fastest cluster costs $0 of GPUs and servers to buy."""
    text = """\
schema_version: 1
name: owned-train
workload: {kind: train, model: llama2-7b, tokens: 1T, precision: bf16}
objective: min_cost
deadline_days: 1
budget: 200k
site: {datacenter: true}
inventory:
  - {gpu: a100-sxm-80gb, count: 512, server: hgx-ampere-8, servers: 64}
hardware: {allow_gpus: [a100-sxm-80gb], max_gpus: 512}
procurement: {rent: false}
"""
    path = tmp_path / "owned.yaml"
    path.write_text(text)
    r = CliRunner().invoke(main, ["solve", str(path)])
    assert r.exit_code == 1 and "on 512 x a100-sxm-80gb ($0 of GPUs and servers: 512 GPUs in 64 x hgx-ampere-8)" in (
        r.output), r.output
