"""The commands a user meets: help, estimate, catalog, solve output formats and BOM files."""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from optimizer.cli import main

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("args", [[], ["solve"], ["estimate"], ["estimate", "train"], ["catalog"],
                                  ["catalog", "list"], ["catalog", "show"], ["catalog", "validate"]])
def test_every_command_has_help(args):
    r = run(*args, "--help")
    assert r.exit_code == 0 and "Usage:" in r.output


def test_estimate_train_json_keys():
    r = run("estimate", "train", "--model", "llama2-7b", "--gpu", "a100-sxm-80gb", "--gpus", "8",
            "--micro-batch", "1", "--global-batch", "256", "--tokens", "1T", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    for key in ("fits", "memory_gb_per_gpu", "memory_breakdown_gb", "step_time_s", "tokens_per_s",
                "tflops_per_gpu", "mfu", "days"):
        assert key in out
    assert out["fits"] is True
    assert out["tokens_per_s"] == pytest.approx(out["tokens_per_step"] / out["step_time_s"])
    assert 0.99 < out["goodput"] < 1  # 8 GPUs rarely fail, but they may
    assert out["days"] == pytest.approx(1e12 / out["tokens_per_s"] / out["goodput"] / 86400)
    assert 0.3 < out["mfu"] < 0.75


def test_estimate_picks_a_server_that_holds_the_replica():
    """Eight 4090s at TP 8 need a server of eight: the default takes the first that holds them, not
    the 4-card tower; a named server too small, or a TP beyond every server, says what would fit."""
    base = ("estimate", "serve", "--model", "llama2-7b", "--gpu", "rtx-4090", "--input-len", "512",
            "--output-len", "256", "--format", "json")
    r = run(*base, "--gpus", "8", "--tp", "8")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["server"] == "rig-8-consumer"
    assert json.loads(run(*base, "--gpus", "1").output)["server"] == "desktop-4"  # one card: the tower
    small = run(*base, "--gpus", "8", "--tp", "8", "--server", "desktop-4")
    assert small.exit_code == 2 and "name --server rig-8-consumer (8 GPUs)" in small.output
    huge = run(*base, "--gpus", "16", "--tp", "16")
    assert huge.exit_code == 2 and "at most 8" in huge.output
    t = run("estimate", "train", "--model", "llama2-7b", "--gpu", "rtx-4090", "--gpus", "8", "--tp", "8",
            "--format", "json")
    assert t.exit_code == 0 and json.loads(t.output)["server"] == "rig-8-consumer", t.output


def test_estimate_reports_a_plan_that_does_not_fit():
    r = run("estimate", "train", "--model", "llama2-70b", "--gpu", "h100-sxm", "--gpus", "8", "--format", "json")
    assert r.exit_code == 1  # printed in full, but it cannot run: infeasible
    assert json.loads(r.output)["fits"] is False


def test_estimate_model_from_a_file(tmp_path):
    shape = tmp_path / "m.yaml"
    shape.write_text("layers: 2\nhidden: 256\nheads: 4\nkv_heads: 4\nffn_hidden: 1024\nvocab: 1000\n"
                     "seq_len: 128\nmlp: gelu\n")
    r = run("estimate", "train", "--model", str(shape), "--gpu", "rtx-4090", "--gpus", "1", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["fits"] is True


def test_catalog_list_show_validate():
    r = run("catalog", "list")
    assert r.exit_code == 0 and "h100-sxm" in r.output and "rtx-4090" in r.output
    gpus = json.loads(run("catalog", "list", "--format", "json").output)
    assert len(gpus) >= 18 and all(g["price"]["source"] and g["price"]["date"] for g in gpus)
    r = run("catalog", "show", "h100-sxm")
    assert r.exit_code == 0 and "989" in r.output
    r = run("catalog", "show", "h100-sx")
    assert r.exit_code == 2 and "Did you mean 'h100-sxm'" in r.output
    r = run("catalog", "validate")
    assert r.exit_code == 0 and "is valid" in r.output


REQUIRED_GPUS = {"h100-sxm", "h100-pcie", "h200-sxm", "h800-sxm", "b200", "a100-sxm-40gb", "a100-sxm-80gb",
                 "a100-pcie-80gb", "a800-sxm", "l40s", "l4", "rtx-6000-ada", "rtx-a6000", "rtx-4090", "rtx-3090",
                 "v100-sxm2", "mi250", "mi300x", "gaudi2"}


def test_catalog_has_every_required_gpu(catalog):
    assert set(catalog.gpus) >= REQUIRED_GPUS
    assert not catalog.gpus["rtx-4090"].datacenter_license


def test_solve_formats_and_determinism(tiny_problem):
    first = run("solve", str(tiny_problem), "--format", "json")
    assert first.exit_code == 0, first.output
    data = json.loads(first.output)
    for key in ("status", "objective", "gap", "plan", "cost", "bom"):
        assert key in data
    assert data["status"] == "optimal"
    assert data["plan"]["days"] <= 30
    assert sum(r["extended_price_usd"] for r in data["bom"]) == pytest.approx(data["cost"]["capex_usd"])
    assert run("solve", str(tiny_problem), "--format", "json").output == first.output
    text = run("solve", str(tiny_problem))
    assert text.exit_code == 0 and "Buy " in text.output and "Bill of materials" in text.output
    md = run("solve", str(tiny_problem), "--format", "markdown", "--solver", "pulp")
    assert md.exit_code == 0 and "| category |" in md.output


def test_solve_reports_the_time_limit_it_ran_under(tiny_problem):
    """--time-limit replaces the problem's solver.time_limit_s, and the answer says so."""
    text = run("solve", str(tiny_problem), "--time-limit", "7")
    assert text.exit_code == 0 and "(time limit 7 s)" in text.output, text.output
    data = json.loads(run("solve", str(tiny_problem), "--time-limit", "7", "--format", "json").output)
    assert data["solver"]["time_limit_s"] == 7.0
    assert "(time limit 7 s)" not in run("solve", str(tiny_problem)).output


@pytest.mark.parametrize("ext", [".csv", ".xlsx", ".json", ".md"])
def test_bom_files(tiny_problem, tmp_path, ext):
    out = tmp_path / f"bom{ext}"
    r = run("solve", str(tiny_problem), "--bom", str(out))
    assert r.exit_code == 0, r.output
    assert out.exists() and out.stat().st_size > 0
    again = tmp_path / f"again{ext}"
    assert run("solve", str(tiny_problem), "--bom", str(again)).exit_code == 0
    assert again.read_bytes() == out.read_bytes()  # byte-for-byte deterministic, .xlsx included
    if ext == ".csv":
        rows = list(csv.DictReader(out.open()))
        assert rows[0]["category"] == "gpu" and int(rows[0]["quantity"]) > 0
        assert {"category", "sku", "description", "quantity", "unit_price_usd", "extended_price_usd",
                "power_w", "source"} <= set(rows[0])
    elif ext == ".xlsx":
        from openpyxl import load_workbook

        ws = load_workbook(out).active
        assert ws.cell(1, 1).value == "category" and ws.cell(2, 1).value == "gpu"
    elif ext == ".json":
        assert json.loads(out.read_text())[0]["category"] == "gpu"
    else:
        assert "| gpu |" in out.read_text()


def test_perf_is_pure():
    """perf imports no solver, CLI, pandas or I/O modules."""
    banned = {"ortools", "pulp", "click", "pandas", "yaml", "pydantic", "os", "io", "pathlib", "json", "csv"}
    for path in (ROOT / "optimizer" / "perf").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in banned, f"{path.name} imports {name}"
                if name.startswith("optimizer."):
                    assert name.startswith("optimizer.perf"), f"{path.name} imports {name}"


def test_estimate_default_global_batch_fits_any_dp():
    r = run("estimate", "train", "--model", "llama2-70b", "--gpu", "h100-sxm", "--gpus", "1024", "--tp", "8",
            "--pp", "4", "--tokens", "2T", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["fits"] and out["tokens_per_step"] % (32 * 4096) == 0
    assert 10 < out["days"] < 60


def test_serving_fits_only_within_the_engines_share_of_memory():
    """vLLM takes 0.9 of the GPU (gpu_memory_utilization): its largest batch fits, one more does not,
    and the capacity printed is that share, not the whole card."""
    args = ["estimate", "serve", "--model", "llama2-7b", "--gpu", "h100-sxm", "--gpus", "1", "--engine", "vllm",
            "--input-len", "512", "--output-len", "256", "--format", "json"]
    top = json.loads(CliRunner().invoke(main, args).output)
    assert top["memory_capacity_gb"] == pytest.approx(0.9 * 80 * 2**30 / 1e9)  # 80 GiB
    at = json.loads(CliRunner().invoke(main, [*args, "--batch", str(top["max_batch"])]).output)
    over = json.loads(CliRunner().invoke(main, [*args, "--batch", str(top["max_batch"] + 1)]).output)
    assert at["fits"] and not over["fits"]


def test_an_assumed_price_says_assumption_once():
    from optimizer.catalog import Price
    from optimizer.report import _src

    assert _src(Price(usd=1.0, date="2026-11", source="assumption: no price found", assumption=True)) == \
        "ASSUMPTION: no price found [2026-11]"
    assert _src(Price(usd=1.0, date="2026-11", source="vendor quote", assumption=True)) == \
        "ASSUMPTION: vendor quote [2026-11]"
    assert _src(Price(usd=1.0, date="2026-11", source="list price", assumption=False)) == "list price [2026-11]"
    out = run("solve", str(ROOT / "problems" / "lab_budget.yaml"), "--format", "json").output
    assert "assumption: assumption" not in out.lower()
    for path in (ROOT / "tests" / "snapshots").glob("solve_*.md"):  # the prices-used lines of every answer
        text = path.read_text().lower()
        assert "(assumption) assumption" not in text and "assumption: assumption" not in text, path.name


def test_estimate_serve_with_attention_data_parallelism():
    """--attention-dp: each GPU keeps its own sequences' KV cache, so an MLA model fits a larger batch;
    the text and the JSON say the layout."""
    args = ["estimate", "serve", "--model", "deepseek-r1", "--gpu", "h200-sxm", "--gpus", "8", "--tp", "8",
            "--precision", "fp8", "--kv-precision", "fp8", "--input-len", "1000", "--output-len", "1000",
            "--format", "json"]
    plain = json.loads(CliRunner().invoke(main, args).output)
    dp = json.loads(CliRunner().invoke(main, args + ["--attention-dp"]).output)
    assert dp["attention_dp"] and not plain["attention_dp"]
    assert dp["max_batch"] > 5 * plain["max_batch"]
    text = CliRunner().invoke(main, args[:-2] + ["--attention-dp"]).output
    assert "TP=8 PP=1 (attention data-parallel)" in text


def test_estimate_says_when_vllms_unsplit_paged_attention_reads_the_kv_cache_per_query_head():
    """vLLM 0.6.1 on ROCm runs PagedAttention V1 once sequences x query heads pass 512 (Llama 3 8B
    on one GPU: 32 query heads, so past 16 sequences) at a 2048-token prompt: the estimate says the
    KV cache is read four times (32 query heads over 8 KV heads), and the attention part grows."""
    args = ["estimate", "serve", "--model", "llama3-8b", "--gpu", "mi300x", "--gpus", "1", "--engine",
            "vllm-rocm-0.6.1", "--input-len", "2048", "--output-len", "2048"]
    split, unsplit = (json.loads(run(*args, "--batch", b, "--format", "json").output) for b in ("16", "17"))
    assert split["kv_read_factor"] == 1.0 and unsplit["kv_read_factor"] == pytest.approx(4.0)
    per_seq = [e["decode_breakdown_ms"]["kv_read"] / e["batch_per_replica"] for e in (split, unsplit)]
    assert per_seq[1] == pytest.approx(4.0 * per_seq[0], rel=0.01)
    assert "the cache read 4 times: vLLM's PagedAttention V1" in run(*args, "--batch", "17").output
    assert "PagedAttention" not in run(*args, "--batch", "16").output


def test_estimate_names_the_link_tp_all_reduces_cross_and_whether_it_is_assumed():
    """With TP the estimate says which link the all-reduces cross, at what bus bandwidth, and
    whether the catalog assumes it: the A10G's 3.1 GB/s was measured on a g5.12xlarge and the RTX
    4090's host-memory path on an 8-GPU rig (14.4 GB/s); PCIe 3.0 GeForce cards (2080 Ti beyond its
    NVLink pair) borrow that figure, an assumption. Without TP there is no such line."""
    args = ["estimate", "serve", "--model", "llama2-7b", "--input-len", "512", "--output-len", "256", "--batch", "8"]
    a10g = json.loads(run(*args, "--gpu", "a10g", "--gpus", "4", "--tp", "4", "--format", "json").output)["tp_link"]
    assert a10g["id"] == "pcie4-g5" and a10g["bus_bandwidth_gbs"] == pytest.approx(3.1, rel=0.01)
    assert not a10g["assumption"] and a10g["latency_us"] > 0
    text = run(*args, "--gpu", "rtx-4090", "--gpus", "4", "--tp", "4").output
    assert "TP all-reduces over pcie4-no-p2p" in text and "14.4 GB/s bus bandwidth" in text
    assert "(sourced in catalogs/network.yaml)" in text and "(an assumption: " not in text
    text = run(*args, "--gpu", "rtx-2080-ti", "--gpus", "4", "--tp", "4").output
    assert "TP all-reduces over pcie3-no-p2p" in text and "(an assumption: " in text
    assert "TP all-reduces" not in run(*args, "--gpu", "rtx-4090", "--gpus", "1").output
    one = json.loads(run(*args, "--gpu", "a10g", "--gpus", "1", "--format", "json").output)
    assert one["tp_link"] is None


def test_estimate_says_when_an_overlap_scheduler_hides_the_host_work():
    """SGLang schedules the next step on the host while the GPU runs this one: its estimate says how
    much host work the GPU's step hid, and the printed parts still add up to the step; vLLM's host
    work adds to the step as "overhead"."""
    args = ["estimate", "serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "1", "--input-len", "512",
            "--output-len", "256", "--batch", "64"]
    sglang = json.loads(run(*args, "--engine", "sglang", "--format", "json").output)
    parts = sglang["decode_breakdown_ms"]
    assert parts["host_work"] > parts["overhead"]
    assert "the engine's overlap scheduler" in run(*args, "--engine", "sglang").output
    vllm = json.loads(run(*args, "--engine", "vllm", "--format", "json").output)["decode_breakdown_ms"]
    assert vllm["host_work"] == pytest.approx(vllm["overhead"])
    assert "overlap scheduler" not in run(*args, "--engine", "vllm").output


def test_stale_prices_are_flagged():
    """Issue 15, item 11: a price dated over 12 months before the catalog's prices says so."""
    import re

    from optimizer.catalog import load_catalog
    from optimizer.report.tco import _month

    asof = _month(load_catalog().prices_as_of)
    flagged = 0
    for path in (ROOT / "tests" / "snapshots").glob("solve_*.md"):
        for line in path.read_text().splitlines():
            m = re.match(r"- \w+ \S+: \$[\d,.]+(?: per GPU-hour)? \[([^\]]+)\]", line)
            if not m or _month(m.group(1)) is None or "(override" in line:
                continue
            stale = asof - _month(m.group(1)) > 12
            assert ("(stale:" in line) == stale, (path.name, line)
            flagged += stale
    assert flagged > 0 and _month("2024-06") == 2024 * 12 + 5 and _month("undated") is None
