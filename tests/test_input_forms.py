"""Input the way people type it (issue 15, item 8): `budget: 500k`, `input_len: 1k`, 50,000 inside
a flow mapping, GPU names as people say them, each checked from the CLI on a problem file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from optimizer.catalog import gpu_names
from optimizer.cli import main
from optimizer.validation import thousands_in_flow
from tests.conftest import ROOT

SERVING = """\
schema_version: 1
name: typed
workload:
  kind: serve
  model: llama2-7b
  precisions: [fp16]
  classes:
    - {name: chat, input_len: 1k, output_len: 256, output_tokens_per_s: 20,000, tpot_ms: 60}
objective: min_cost
site: {datacenter: false}
hardware:
  allow_gpus: ["4090", "RTX 3090"]
search: {tp: [1, 2], pp: [1]}
solver: {time_limit_s: 20}
"""


def _solve(tmp_path: Path, text: str, *args: str):
    path = tmp_path / "typed.yaml"
    path.write_text(text)
    return CliRunner().invoke(main, ["solve", str(path), *args])


def test_lengths_thousands_and_gpu_names_as_people_type_them(tmp_path):
    r = _solve(tmp_path, SERVING, "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    chat = out["plan"]["classes"][0]
    assert chat["demand_output_tokens_per_s"] == 20_000
    assert {x["gpu"] for x in out["plan"]["replicas"]} <= {"rtx-4090", "rtx-3090"}
    assert all(x["class"] == "chat" for x in out["plan"]["replicas"])
    # the same problem written with ids and plain numbers gives the same answer
    plain = SERVING.replace("input_len: 1k", "input_len: 1000").replace("20,000", "20000").replace(
        '["4090", "RTX 3090"]', "[rtx-4090, rtx-3090]")
    same = json.loads(_solve(tmp_path, plain, "--format", "json").output)
    assert same["objective"] == out["objective"] and same["bom"] == out["bom"]


def test_a_budget_given_as_a_number_is_capex(tmp_path):
    root = Path(__file__).resolve().parent.parent
    text = (root / "problems" / "lab_budget.yaml").read_text()
    assert "budget:" in text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("budget:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    scalar = "\n".join([*lines[:start], "budget: 500k", *lines[end:]]) + "\n"
    r = _solve(tmp_path, scalar, "--format", "json")
    assert r.exit_code == 0, r.output
    problem = json.loads(r.output)["problem"]
    assert problem["budget_usd"] == 500_000 and problem["budget_covers"] == "capex"


def test_an_ambiguous_gpu_name_lists_what_it_could_be(tmp_path):
    r = _solve(tmp_path, SERVING.replace('["4090", "RTX 3090"]', '["H100"]'))
    assert r.exit_code == 2
    assert "field 'hardware.allow_gpus[0]': 'H100' could be any of h100-pcie, h100-sxm, h100-sxm-96gb-500w" in r.output
    unknown = _solve(tmp_path, SERVING.replace('["4090", "RTX 3090"]', '["RTX 9090"]'))
    assert unknown.exit_code == 2 and "unknown id 'RTX 9090'" in unknown.output


@pytest.mark.parametrize("name, gpu", [
    ("H100 SXM", "h100-sxm"), ("4090", "rtx-4090"), ("MI300X", "mi300x"), ("3090", "rtx-3090"),
    ("3090 Ti", "rtx-3090-ti"), ("RTX 6000 Ada", "rtx-6000-ada"), ("NVIDIA A100 SXM 80GB", "a100-sxm-80gb"),
    ("Gaudi 3", "gaudi3")])
def test_gpu_names_resolve_when_one_gpu_fits(catalog, name, gpu):
    assert gpu_names.resolve(name, catalog.gpus) == gpu


def test_thousands_separators_only_where_yaml_would_split_a_value():
    text = "classes:\n  - {name: chat, output_tokens_per_s: 50,000, ttft_ms: 1,500}\ntp: [100,200]\nx: 1,000\n"
    fixed = thousands_in_flow(text)
    assert "output_tokens_per_s: 50000, ttft_ms: 1500}" in fixed
    assert "tp: [100,200]" in fixed and "x: 1,000" in fixed  # a list and a block value are left alone
    quoted = '  - {name: "a: 1,000", n: 2}\n'
    assert thousands_in_flow(quoted) == quoted


def test_a_key_given_twice_is_bad_input_not_last_wins(tmp_path):
    """PyYAML keeps the last of two equal keys silently; a second `classes:` or `budget:` would
    quietly replace the first. Every YAML file gpuopt reads refuses it, naming both lines."""
    r = _solve(tmp_path, SERVING + "objective: min_time\n")
    assert r.exit_code == 2
    assert "the key 'objective' is given twice (lines 9 and 15)" in r.output and "keep one of them" in r.output


def test_a_deadline_beyond_a_century_is_bad_input(tmp_path):
    root = Path(__file__).resolve().parent.parent
    text = (root / "problems" / "llama2_70b_pretrain.yaml").read_text()
    far = "\n".join("deadline_days: 1e300" if line.startswith("deadline_days:") else line
                    for line in text.splitlines()) + "\n"
    r = _solve(tmp_path, far)
    assert r.exit_code == 2 and "field 'deadline_days'" in r.output and "36525" in r.output


IMPOSSIBLE = (ROOT / "benchmarks" / "problems" / "impossible_405b.yaml").read_text()  # also timed there


def test_an_impossible_run_names_every_wall(tmp_path):
    """405B on 15T tokens in 7 days for $1M (issue 15, item 2): not only '+23,000 days' but the
    budget the deadline would take, the global-batch cap and the GPU count, each with its number."""
    r = _solve(tmp_path, IMPOSSIBLE)
    assert r.exit_code == 1, r.output
    out = r.output
    walls = [line for line in out.splitlines() if line.startswith("  - ")]
    # every limit in the way, in the order it binds: the budget, then the batch cap, the GPU count, the deadline
    assert [w.split()[1] for w in walls] == ["budget", "global", "GPU", "deadline"], walls
    assert "budget $1,000,000 (budget.usd)" in walls[0] and "x faster" in walls[0]
    assert "cap 4.0M tokens" in walls[1] and "workload.global_batch.max_tokens" in walls[1]
    assert "GPU count 4,096 (hardware.max_gpus, the default)" in walls[2]  # the file sets neither cap
    assert "workload.global_batch.max_tokens, the default)" in walls[1]
    assert "deadline 7.0 days (deadline_days)" in walls[3]
    # GB300 comes in NVL72 racks bought whole: the hardware is priced in whole racks, not 54.2 of them
    assert "on 3,904 x gb300 ($239,250,000 of GPUs and servers: 3,960 GPUs in 55 x nvl72-gb300)" in walls[0]
    # what $1M trains in does not depend on the deadline: a rented term is billed for as long as the
    # job runs, not for the deadline's month (before that fix it read 3,764 days at 7 days and 24,309
    # at 3,800; the same figure at both deadlines is the point)
    later = _solve(tmp_path, IMPOSSIBLE.replace("deadline_days: 7", "deadline_days: 3800"))
    assert later.exit_code == 1
    fastest = r"within it the fastest cluster takes ([\d,.]+) days"
    within = [re.search(fastest, text) for text in (walls[0], later.output)]
    assert within[0] and within[1] and within[0].group(1) == within[1].group(1)
    assert float(within[0].group(1).replace(",", "")) == pytest.approx(31_571, rel=1e-3)


def test_site_limits_not_the_batch_cap_stop_a_racked_cluster(tmp_path):
    """export_controlled_racks at 5 days: 96 GPUs are far under the 976-sequence batch cap; what
    stops the cluster is the site's 4 racks, the 16-unit H800 stock and the export region."""
    text = (ROOT / "problems" / "export_controlled_racks.yaml").read_text().replace("deadline_days: 32",
                                                                                    "deadline_days: 5")
    r = _solve(tmp_path, text)
    walls = [line for line in r.output.splitlines() if line.startswith("  - ")]
    assert r.exit_code == 1 and len(walls) == 3, r.output
    assert "global batch" not in r.output
    # the export rules, which a buyer may not be free to lift, with what they cost in days
    assert walls[1].startswith("  - export rules of region export-controlled (site.region): only h800-sxm, "
                               "a800-sxm, h20 may be bought; without them the fastest cluster")
    assert "rented from" in walls[1]  # a min-cost problem rents by default: lifting the rules opens offers too
    assert walls[0].startswith("  - the site's limits (4 racks of 20 kW (site.racks), at most 16 h800-sxm "
                               "(hardware.max_units)) stop the fastest cluster at 96 GPUs")
    assert "x a800-sxm, some $" in walls[0]  # the GPUs the deadline needs, named


def test_a_budget_the_deadline_needs_many_times_over_is_named_after_the_gpu_count(tmp_path):
    """Lifting the power cap and the GPU count is not enough when the GPUs the deadline needs cost
    29x the budget: the budget is named too, so 'lifting the limits above' is true."""
    text = ("schema_version: 1\nname: h20-only\n"
            "workload: {kind: train, model: llama3-70b, tokens: 2T, precision: bf16}\n"
            "objective: min_time\nbudget: 3M\ndeadline_days: 30\n"
            "site: {datacenter: true, power_cap_kw: 40, region: export-controlled-2023}\n"
            "hardware: {max_gpus: 64}\n")
    r = _solve(tmp_path, text)
    walls = [line.split()[1] for line in r.output.splitlines() if line.startswith("  - ")]
    assert r.exit_code == 1 and walls == ["power", "GPU", "budget", "export", "deadline"], r.output
    assert "budget $3,000,000 (budget.usd): the 4,056 x h20 that 30.0 days needs cost some $" in r.output


def test_walls_price_whole_servers():
    """A rack-scale unit (NVL72) is bought whole with every slot filled; an 8-GPU server that may
    be part-filled costs its GPUs and the whole chassis (milp.purchase decides, as for a solve)."""
    from dataclasses import replace

    from optimizer.plans.groups import Group
    from optimizer.recommend.walls import hardware_cost

    base = Group(gpu="g", server="s", fabric=None, slots=8, full_only=False, gpu_usd=10.0,
                 server_usd=100.0, gpu_w=0.0, server_w=0.0, ports_per_server=0, port_usd=0.0, port_w=0.0,
                 switch_ports=0, switch_usd=0.0, switch_w=0.0)
    rack = replace(base, slots=72, full_only=True, server_usd=1000.0, server="nvl72")
    # 3,960 x $10 + 55 x $1,000
    assert hardware_cost(rack, 3904) == "$94,600 of GPUs and servers: 3,960 GPUs in 55 x nvl72"
    assert hardware_cost(replace(base, server="hgx"), 12.2) == "$330 of GPUs and servers: 13 GPUs in 2 x hgx"
    rented = replace(base, offer="cloud-x", rent_usd_per_gpu_h=2.5)
    assert hardware_cost(rented, 100) == "rented from cloud-x at $2.5/GPU-hour"


def test_explain_names_the_same_walls_as_solve(tmp_path):
    """70B on 2T tokens in 2 days for $1M on H100s only, at most 64 sequences a step (a second's
    solve): explain lists the walls solve reports (budget, global batch, GPU count, deadline), in the
    same order. 64 sequences stop data parallelism at 512 GPUs (4 replicas of TP 8 x PP 16), half the
    1,024 allowed, so lifting the batch cap gains before the GPU count binds."""
    text = IMPOSSIBLE.replace("llama3-405b, tokens: 15T", "llama2-70b, tokens: 2T").replace(
        "deadline_days: 7", "deadline_days: 2").replace(
        "precision: bf16}", "precision: bf16, global_batch: {max_seqs: 64}}") + \
        "hardware: {allow_gpus: [h100-sxm], max_gpus: 1024}\n"
    r = _solve(tmp_path, text)
    walls = [line for line in r.output.splitlines() if line.startswith("  - ")]
    assert r.exit_code == 1 and [w.split()[1] for w in walls] == ["budget", "global", "GPU", "deadline"], r.output
    assert "at the same speed each, rented from " in walls[2] and "some rented" not in r.output  # min_cost rents
    e = CliRunner().invoke(main, ["explain", str(tmp_path / "typed.yaml")])
    assert e.exit_code == 1 and "\n".join(walls) in e.output, e.output
    # the records behind the lines: each wall starts where the one before it left the job, the
    # days only fall, and lifting all of them reaches the deadline
    from optimizer.catalog import load_catalog
    from optimizer.problem import load_priced
    from optimizer.recommend import deadline_walls, plan_table, repairs

    problem, cat = load_priced(tmp_path / "typed.yaml", load_catalog())
    late = next(r for r in repairs(problem, cat, plan_table(problem, cat), "ortools", 30) if r.limit == "deadline")
    found = deadline_walls(problem, cat, "ortools", 30, late.needed / 86400)
    assert [w.limit for w in found] == ["budget", "global_batch", "max_gpus", "deadline"]
    assert found[0].days_before == pytest.approx(late.needed / 86400)
    lifted = found[:-1]  # the limits lifted in turn; the last record is the deadline itself
    for a, b in zip(lifted[:-1], lifted[1:], strict=True):
        assert a.days_after == pytest.approx(b.days_before) and a.days_after < a.days_before
    assert lifted[-1].days_after == pytest.approx(2.0) and found[0].field == "budget.usd"
    assert found[0].days_after < found[0].days_before  # the budget's wall is the one that gains


WALL = """\
schema_version: 1
name: wall-cap
workload: {kind: train, model: llama2-7b, tokens: 200B, precision: bf16}
objective: min_time
budget: {usd: 2M}
site: {datacenter: true, facility_power_cap_kw: 30, pue: 1.25}
hardware: {allow_gpus: [h100-sxm, a100-sxm-80gb]}
search: {tp: [1, 2], pp: [1], micro_batch: [1, 2], zero: [1]}
procurement: {rent: false}
"""


def test_a_facility_power_cap_is_wall_power(tmp_path):
    """Issue 15, item 8: a cap at the wall (IT power x PUE) is the IT cap it leaves at the site's
    PUE: 30 kW at PUE 1.25 plans exactly as 24 kW of IT power, and the answer says so at the wall."""
    wall = _solve(tmp_path, WALL, "--format", "json")
    it = _solve(tmp_path, WALL.replace("facility_power_cap_kw: 30", "power_cap_kw: 24"), "--format", "json")
    assert wall.exit_code == 0 and it.exit_code == 0, wall.output + it.output
    a, b = json.loads(wall.output), json.loads(it.output)
    assert a["objective"] == b["objective"] and a["cost"]["it_power_kw"] <= 24 + 1e-9
    assert a["problem"]["facility_power_cap_kw"] == 30 and "facility_power_cap_kw" not in b["problem"]
    (line,) = [v for v in a["verification"] if "facility cap" in v]
    assert "kW at the wall, PUE 1.25) ≤ the facility cap 30.0 kW" in line
    both = _solve(tmp_path, WALL.replace("facility_power_cap_kw: 30", "facility_power_cap_kw: 30, power_cap_kw: 20"))
    assert both.exit_code == 0 and "and the IT cap 20.0 kW" in both.output  # the lower of the two binds
    # a GPU ruled out for power names the IT cap and the facility cap it comes from
    racks = json.loads(_solve(tmp_path, WALL.replace("[h100-sxm, a100-sxm-80gb]", "[h100-sxm, gb200]"),
                              "--format", "json").output)
    assert racks["excluded_gpus"]["gb200"] == ("power: one nvl72-gb200 server needs 120.0 kW, IT power cap 24.0 kW "
                                               "(the 30.0 kW facility cap at PUE 1.25)")


def test_every_fault_of_a_file_is_reported_in_one_run(tmp_path):
    """Issue 15, item 8: a bad field, an unknown GPU and an unknown model are all named at once,
    not one per run."""
    text = """\
schema_version: 1
name: bad
workload: {kind: train, model: llama2-7c, tokens: lots}
objective: min_cost
deadline_days: -3
hardware: {allow_gpus: [h100-sx]}
"""
    r = _solve(tmp_path, text)
    assert r.exit_code == 2 and "Traceback" not in r.output
    for words in ("'workload.tokens'", "'deadline_days'", "unknown id 'h100-sx'. Did you mean 'h100-sxm'?",
                  "unknown model 'llama2-7c'. Did you mean 'llama2-7b'?"):
        assert words in r.output, (words, r.output)
    # with every other field right, the two unknown names still come together
    fixed = text.replace("tokens: lots", "tokens: 1T").replace("deadline_days: -3", "deadline_days: 30")
    r = _solve(tmp_path, fixed)
    assert r.exit_code == 2 and "'h100-sx'" in r.output and "'llama2-7c'" in r.output, r.output


TRAIN_7B = """\
schema_version: 1
name: grid
workload: {kind: train, model: llama2-7b, tokens: 100B}
objective: min_cost
deadline_days: 30
"""  # a training problem to add faulty sections to


def test_every_name_of_a_file_and_its_grid_are_checked_in_one_run(tmp_path):
    """Six faults in six sections (the search grid, an excluded GPU, a unit cap, the inventory, the
    offers, the price book) and an ambiguous GPU name: one run names every one, each with its field."""
    text = TRAIN_7B + """\
search: {tp: [3]}
hardware: {allow_gpus: ["H100", h100-sxm, a100-sxm-80gb], exclude_gpus: ["4090ti"], max_units: {h100-sxn: 16}}
inventory:
  - {gpu: a100-80, count: 8, server: hgx-ampere-8, servers: 1}
prices: {l40z: 5000}
procurement: {offers: [aws-p5-h101]}
"""
    r = _solve(tmp_path, text)
    assert r.exit_code == 2 and "Traceback" not in r.output
    for field in ("'search.tp[0]'", "'hardware.allow_gpus[0]': 'H100' could be any of", "'hardware.exclude_gpus[0]'",
                  "'hardware.max_units.h100-sxn'", "'inventory[0].gpu'", "'procurement.offers[0]'",
                  "'prices.l40z'"):
        assert field in r.output, (field, r.output)


def test_grid_values_no_plan_can_use_are_bad_input(tmp_path):
    """PP above the model's layers, or CP that does not divide the sequence, is a fault of the file
    (exit 2, the field and the values that would do), not 'no plan in the search grid' (exit 1)."""
    pp = _solve(tmp_path, TRAIN_7B + "search: {pp: [1, 64]}\n")
    assert pp.exit_code == 2 and "field 'search.pp[1]': PP 64 has more stages than the 32 layers" in pp.output
    cp = _solve(tmp_path, TRAIN_7B + "search: {cp: [3]}\n")
    assert cp.exit_code == 2 and "field 'search.cp[0]': CP 3 does not divide the sequence length (4096" in cp.output


def test_counts_days_and_shares_as_people_type_them(tmp_path):
    """'1,000' and '2k' for counts and days, '10%' for a share; a fraction of a GPU is refused."""
    text = """\
schema_version: 1
name: typed
workload: {kind: train, model: llama2-7b, tokens: 20B, global_batch: {min_seqs: 64}}
objective: min_cost
deadline_days: 1,000
site: {datacenter: true}
hardware: {allow_gpus: [h100-sxm], max_gpus: 2k, memory_headroom: 15%}
search: {tp: [1], pp: [1], micro_batch: [1, 2], zero: [1]}
procurement: {rent: false}
"""
    r = _solve(tmp_path, text.replace("max_gpus: 2k", "max_gpus: '1,000'"), "--format", "json")
    assert r.exit_code == 0, r.output
    assert "15% headroom" in _solve(tmp_path, text).output
    bad = _solve(tmp_path, text.replace("max_gpus: 2k", "max_gpus: 1.5"))
    assert bad.exit_code == 2 and "'hardware.max_gpus': expected a whole number such as 64, '1,000' or '2k'" in (
        bad.output)


def test_estimate_takes_gpu_names_and_lengths_as_people_type_them():
    """--gpu 4090 / "H100 SXM" resolve as in problem files, "H100" lists what it could be; --input-len 1k
    is 1,000 tokens (k = 1,000, as in problem files); a fraction or junk is bad input (exit 2)."""
    def est(*args: str):
        return CliRunner().invoke(main, ["estimate", "serve", "--model", "llama2-7b", "--gpus", "1", *args])

    r = est("--gpu", "4090", "--input-len", "1k", "--output-len", "256")
    assert r.exit_code == 0 and r.output.startswith("llama2-7b on 1 x rtx-4090") and "1000 in / 256 out" in r.output
    r = est("--gpu", "H100", "--input-len", "512", "--output-len", "256")
    assert r.exit_code == 2 and "could be any of h100-pcie, h100-sxm, h100-sxm-96gb-500w" in r.output
    t = CliRunner().invoke(main, ["estimate", "train", "--model", "llama2-7b", "--gpu", "H100 SXM", "--gpus", "8"])
    assert t.exit_code == 0 and "on 8 x h100-sxm" in t.output
    for bad in ("1.5", "abc", "0"):
        r = est("--gpu", "4090", "--input-len", bad, "--output-len", "256")
        assert r.exit_code == 2 and "Traceback" not in r.output and "--input-len" in r.output, (bad, r.output)


def test_an_estimate_that_does_not_fit_says_its_rates_are_hypothetical():
    """70B in fp16 on two 24 GB cards does not fit: the rates printed are what it would do if it
    did, and say so, and the exit code is 1 (infeasible); a configuration that fits prints them
    plainly. A run on no tokens is bad input."""
    r = CliRunner().invoke(main, ["estimate", "serve", "--model", "llama2-70b", "--gpu", "rtx-4090", "--gpus", "2",
                                  "--tp", "2", "--input-len", "512", "--output-len", "256"])
    assert r.exit_code == 1 and "DOES NOT FIT" in r.output
    rates = [line for line in r.output.splitlines() if "tokens/s" in line or "TTFT" in line]
    assert rates and all(line.startswith("if it fit (it does not, see memory): ") for line in rates)
    ok = CliRunner().invoke(main, ["estimate", "serve", "--model", "llama2-7b", "--gpu", "rtx-4090", "--gpus", "1",
                                   "--input-len", "512", "--output-len", "256"])
    assert ok.exit_code == 0 and "if it fit" not in ok.output
    none = CliRunner().invoke(main, ["estimate", "train", "--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "8",
                                     "--tokens", "0"])
    assert none.exit_code == 2 and "--tokens '0': must be a positive finite number" in none.output


def test_memory_that_runs_out_at_the_gpus_the_budget_buys_names_the_budget(tmp_path, catalog):
    """405B on B300s for $1M: 16 GPUs are all the budget buys, and at 16 ZeRO cannot shard the
    training state thinly enough; with more GPUs it fits (estimate: 512 B300s at TP8 PP16). The
    reason names the budget as the limit, not memory alone."""
    from optimizer.plans import enumerate_candidates
    from optimizer.problem import load_priced

    path = tmp_path / "p.yaml"
    path.write_text(IMPOSSIBLE)
    p, cat = load_priced(path, catalog)
    why = enumerate_candidates(p, cat).gpu_reasons["b300"]
    assert why.startswith("memory: needs") and "at most 16 of them within the budget" in why
    fits = CliRunner().invoke(main, ["estimate", "train", "--model", "llama3-405b", "--gpu", "b300", "--gpus", "512",
                                     "--tp", "8", "--pp", "16"])
    assert fits.exit_code == 0 and "; fits)" in fits.output


def test_an_infeasible_solve_asked_for_json_prints_json(tmp_path):
    """A script that reads `solve --format json` gets the refusal as JSON on stdout, with every
    limit in the way; the exit code stays 1 and the message still goes to stderr."""
    path = tmp_path / "impossible.yaml"
    path.write_text(IMPOSSIBLE)
    r = CliRunner().invoke(main, ["solve", str(path), "--format", "json"])
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert out["status"] == "infeasible" and out["reason"].startswith("no cluster meets every target")
    assert [x.split()[0] for x in out["limits"]] == ["budget", "global", "GPU", "deadline"]


def test_the_decode_step_prints_as_the_sum_of_its_parts():
    """estimate serve's decode step is printed as the parts that add up to it (GEMMs, attention, TP
    all-reduces, launches, overhead), then the two sides of the rooflines the GEMMs and attention are
    (weights and KV read, FLOPs)."""
    import re

    r = CliRunner().invoke(main, ["estimate", "serve", "--model", "llama2-70b", "--gpu", "h100-sxm", "--gpus", "8",
                                  "--tp", "8", "--input-len", "512", "--output-len", "256"])
    m = re.search(r"decode step ([0-9.,]+) ms = ([^;)]+)", r.output)
    assert r.exit_code == 0 and m, r.output
    total = sum(float(part.split()[1].replace(",", "")) for part in m.group(2).split(" + "))
    assert total == pytest.approx(float(m.group(1)), abs=0.1)
    assert "smoothed at the ridge, of: weights_read" in r.output
    # at maximum load TPOT is the decode step plus each token's share of the prompts prefilled between steps
    t = re.search(r"TPOT ([0-9.,]+) ms = decode step ([0-9.,]+) \+ ([0-9.,]+) ms of prompts prefilled", r.output)
    assert t and float(t.group(1)) == pytest.approx(float(t.group(2)) + float(t.group(3)), abs=0.1), r.output
