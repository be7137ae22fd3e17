"""Network fabric sizing (issue 6): leaves and spines at an oversubscription, NICs per server,
cables and optics in the bill of materials, and the bandwidth an oversubscribed fabric leaves."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
from click.testing import CliRunner

from optimizer.cli import main
from optimizer.milp import GroupCount, capex_parts, fabric_links, network_switches
from optimizer.perf.goodput import Reliability
from optimizer.perf.specs import TrainPlan
from optimizer.perf.train import train_step
from optimizer.plans import build_groups, leaf_split
from optimizer.problem import load_priced, load_problem
from optimizer.recommend import recommend
from optimizer.report import bill_of_materials, summary
from tests.conftest import ROOT

PROBLEM = ROOT / "problems" / "fabric_oversubscription.yaml"


@pytest.mark.parametrize(("ports", "ratio", "split"), [
    (64, 1.0, (32, 32)), (64, 2.0, (42, 21)), (64, 3.0, (48, 16)), (40, 1.0, (20, 20)), (40, 1.5, (24, 16)),
    (33, 1.0, (16, 16)), (16, 4.0, (12, 3))])
def test_leaf_split_gives_the_most_server_ports_at_the_ratio(ports, ratio, split):
    down, up = leaf_split(ports, ratio)
    assert (down, up) == split
    assert down + up <= ports and down <= ratio * up + 1e-9
    assert down + 1 + -(-(down + 1) // ratio) > ports  # one more server port would break the ratio


def _ndr_group(catalog, tmp_path, ratio: float):
    text = PROBLEM.read_text().replace("oversubscription: 2", f"oversubscription: {ratio}")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    problem = load_problem(path, catalog)
    return next(g for g in build_groups(problem, catalog, "h100-sxm") if g.fabric == "ib-ndr-8")


def test_switch_counts_follow_the_ports_and_the_ratio(catalog, tmp_path):
    flat, over = _ndr_group(catalog, tmp_path, 1), _ndr_group(catalog, tmp_path, 2)
    assert network_switches(flat, 8) == (1, 0)  # 64 ports: one QM9700
    assert network_switches(flat, 9) == (3, 2)  # 72 ports on 32-down leaves, 3 x 32 uplinks on 64-port spines
    assert network_switches(flat, 54) == (14, 7)  # 432 ports: the llama2_70b_pretrain cluster
    assert network_switches(over, 54) == (11, 4)  # 432 / 42 down; 11 x 21 uplinks / 64
    count = GroupCount(over.key, 432, 54, 11, 4)
    assert fabric_links(over, count) == (432, 231)
    net = capex_parts(over, count)["network"]
    assert net == pytest.approx(432 * (2500 + 684) + 15 * 36_000 + 231 * 684)


def test_oversubscription_halves_bandwidth_between_leaves_only(catalog):
    hw = catalog.hardware("h100-sxm", "hgx-hopper-8", "ib-ndr-8")
    assert hw.oversubscribed(2).network.bw_one_way == pytest.approx(hw.network.bw_one_way / 2)
    assert hw.oversubscribed(1) is hw
    model = catalog.models["llama2-13b"].spec()
    plan = TrainPlan(tp=1, pp=2, dp=104, micro_batch=1, num_micro_batches=8, zero=1)
    fast = train_step(model, hw, plan, *catalog.train_setup(hw.device.name))
    slow = train_step(model, hw.oversubscribed(2), plan, *catalog.train_setup(hw.device.name))
    assert slow.tokens_per_s < fast.tokens_per_s


def test_example_problem_sizes_and_prices_the_fabric(catalog):
    problem, cat = load_priced(PROBLEM, catalog)
    rec = recommend(problem, cat)
    plan = summary(rec, cat)["plan"]
    net = plan["network"]
    count = rec.solution.counts
    assert net["oversubscription"] == 2 and (net["leaf_ports_down"], net["leaf_ports_up"]) == (42, 21)
    assert (count.leaf_switches, count.spine_switches) == network_switches(rec.table.groups[count.group],
                                                                           count.servers)
    rows = bill_of_materials(rec, cat)
    cables = {r.description.rsplit("(", 1)[1]: r.quantity for r in rows if r.category == "cable"}
    assert cables == {"server to leaf)": 8 * count.servers, "leaf to spine)": 21 * count.leaf_switches}
    nics = next(r for r in rows if r.category == "nic")
    assert nics.quantity == 8 * count.servers and "8 per server" in nics.description
    assert sum(r.extended_price_usd for r in rows) == pytest.approx(rec.solution.capex)
    assert sum(r.power_w for r in rows) == pytest.approx(rec.solution.power_w)


def _fabric(rec) -> str | None:
    return rec.table.groups[rec.solution.candidate.group].fabric


def test_oversubscription_moves_the_optimum(catalog, tmp_path):
    """On one fabric, 2:1 buys fewer spines per server but leaves less bandwidth between leaves, so
    the same GPUs train slower. For this job 8-rail NDR is the cheapest answer at either ratio, and
    2:1 saves a leaf and a spine; on 4-rail HDR, whose all-reduce between leaves is already the
    slow part, 2:1 needs more GPUs to meet the deadline. gpuopt finds each."""
    problem, cat = load_priced(PROBLEM, catalog)
    problem = replace(problem, reliability=Reliability())  # the fabric alone: no failures to plan for
    over = recommend(problem, cat)
    flat = recommend(replace(problem, oversubscription=1.0), cat)
    assert _fabric(over) == "ib-ndr-8" and _fabric(flat) == "ib-ndr-8"
    assert over.solution.counts.gpus == flat.solution.counts.gpus
    assert over.solution.counts.spine_switches < flat.solution.counts.spine_switches
    assert flat.solution.tco - over.solution.tco == pytest.approx(162_264, rel=0.01)
    only_ndr8 = tuple(f for f in cat.fabrics if f != "ib-ndr-8")
    pinned_over = recommend(replace(problem, exclude_fabrics=only_ndr8), cat).solution
    pinned_flat = recommend(replace(problem, exclude_fabrics=only_ndr8, oversubscription=1.0), cat).solution
    o, f = pinned_over.counts, pinned_flat.counts
    assert o.gpus == f.gpus and o.spine_switches / o.servers < f.spine_switches / f.servers
    assert pinned_over.tokens_per_s < pinned_flat.tokens_per_s  # slower all-reduce between leaves
    no_ndr8 = (*problem.exclude_fabrics, "ib-ndr-8")
    hdr_over = recommend(replace(problem, exclude_fabrics=no_ndr8), cat)
    hdr_flat = recommend(replace(problem, exclude_fabrics=no_ndr8, oversubscription=1.0), cat)
    assert _fabric(hdr_over) == _fabric(hdr_flat) == "ib-hdr-4"
    assert hdr_over.solution.counts.gpus > hdr_flat.solution.counts.gpus
    assert hdr_flat.solution.tco > flat.solution.tco


def test_a_cluster_on_one_switch_ignores_the_ratio(catalog):
    problem, cat = load_priced(ROOT / "problems" / "lab_budget.yaml", catalog)
    problem = replace(problem, gpus=("rtx-6000-ada",))  # 60 GPUs in 15 servers: one leaf switch
    base = recommend(problem, cat)
    over = recommend(replace(problem, oversubscription=3.0), cat)
    assert base.solution.counts.leaf_switches == 1 and base.solution.counts.spine_switches == 0
    assert over.solution.tokens_per_s == base.solution.tokens_per_s and over.solution.capex == base.solution.capex


def test_report_says_when_two_tiers_are_not_enough(catalog, tmp_path):
    from optimizer.report import network_line
    net = {"fabric": "ib-hdr-8", "ports_per_server": 8, "server_links": 8 * 120, "leaf_switches": 48,
           "spine_switches": 24, "leaf_ports_down": 20, "leaf_ports_up": 20, "oversubscription": 1.0,
           "uplinks": 960, "switch_ports": 40, "two_tier_max_servers": 100}
    assert "third switch tier is needed" in network_line(net)
    assert "third" not in network_line({**net, "server_links": 800})


def test_bad_oversubscription_and_cable_reference_exit_2(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PROBLEM.read_text().replace("oversubscription: 2", "oversubscription: 0.5"))
    r = CliRunner().invoke(main, ["solve", str(path)])
    assert r.exit_code == 2 and "network.oversubscription" in r.output and "Traceback" not in r.output
    root = tmp_path / "cat"
    shutil.copytree(ROOT / "catalogs", root)
    text = (root / "network.yaml").read_text()
    (root / "network.yaml").write_text(text.replace("server_cable: ndr-optic", "server_cable: ndr-optik", 1))
    r = CliRunner().invoke(main, ["catalog", "validate", "--catalog", str(root)])
    assert r.exit_code == 2 and "server_cable" in r.output and "Did you mean 'ndr-optic'" in r.output


def test_cables_are_listed_and_priceable(catalog):
    r = CliRunner().invoke(main, ["catalog", "list", "--kind", "cables"])
    assert r.exit_code == 0 and "ndr-optic" in r.output
    r = CliRunner().invoke(main, ["solve", str(PROBLEM), "--price", "ndr-optic=400"])
    assert r.exit_code == 0 and "ndr-optic" in r.output and "$400" in r.output
