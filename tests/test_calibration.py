"""The model against published serving runs: error targets, no silent drops, a reproducible fit."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from optimizer.calibrate import (
    PCIE_LINKS,
    SERVING_MEDIAN_TARGET,
    default_data_dir,
    fit_serving,
    percentile,
    validate_serving,
)
from optimizer.calibrate_train import (
    TRAINING_MEDIAN_TARGET,
    TRAINING_P90_TARGET,
    apply_training,
    fit_training,
    validate_training,
)
from optimizer.cli import main

SERVING = default_data_dir() / "serving_runs.csv"
TRAINING = default_data_dir() / "training_runs.csv"
ALIASES = default_data_dir() / "aliases.yaml"


@pytest.fixture(scope="module")
def report(catalog):
    return validate_serving(SERVING, catalog)


def test_serving_median_error_meets_the_target(report):
    summary = report.summary()["output_tokens_per_s"]
    assert summary["rows"] >= 200
    assert summary["median_abs_error"] <= SERVING_MEDIAN_TARGET
    assert summary["p90_abs_error"] <= 0.30  # today 24.5 %: a regression guard, not a target


def test_every_row_is_compared_or_explained(report):
    with SERVING.open() as f:
        ids = [row["id"] for row in csv.DictReader(f)]
    compared = {c.row for c in report.comparisons}
    skipped = {i for i, _ in report.skipped}
    assert compared | skipped == set(ids)
    assert not compared & skipped
    assert all(reason for _, reason in report.skipped)


def test_skip_reasons_are_specific(report):
    reasons = dict(report.skipped)
    assert "GPU 'GH200 96GB HBM3 (CG1)' is not in the catalog" in reasons.values()
    assert any("variable request lengths" in r for r in reasons.values())


def test_the_catalog_holds_what_the_fits_produce(catalog):
    """`gpuopt fit` (training, then serving on its result) reproduces every fitted catalog value."""
    train = fit_training(TRAINING, catalog, ALIASES)
    assert train.params == {"a100_gemm": catalog.gpus["a100-sxm-80gb"].matmul_efficiency.bf16,
                            "h100_gemm": catalog.gpus["h100-sxm"].matmul_efficiency.bf16,
                            "elementwise_bytes": catalog.efficiency.elementwise_bytes,
                            "attention_kernel": catalog.efficiency.attention_kernel,
                            "dp_overlap": catalog.efficiency.dp_overlap}
    fit = fit_serving(SERVING, apply_training(catalog, train.params))
    assert fit.params == {"mem_bw": catalog.efficiency.mem_bw, "attention_bw": catalog.efficiency.attention_bw,
                          "decode_gemm": catalog.efficiency.decode_gemm,
                          "pcie_efficiency": catalog.links["pcie4"].efficiency,
                          "h100_fp8_gemm": catalog.gpus["h100-sxm"].matmul_efficiency.fp8}
    assert all(catalog.links[k].efficiency == fit.params["pcie_efficiency"] for k in PCIE_LINKS)
    assert fit.median <= SERVING_MEDIAN_TARGET and train.median <= TRAINING_MEDIAN_TARGET


def test_training_errors_meet_the_targets(catalog):
    report = validate_training(TRAINING, catalog, ALIASES)
    overall = report.overall()
    assert overall["rows"] >= 70
    assert overall["median_abs_error"] <= TRAINING_MEDIAN_TARGET
    assert overall["p90_abs_error"] <= TRAINING_P90_TARGET


def test_every_training_row_is_compared_or_explained(catalog):
    report = validate_training(TRAINING, catalog, ALIASES)
    with TRAINING.open() as f:
        ids = {row["id"] for row in csv.DictReader(f)}
    compared = {c.row for c in report.comparisons}
    skipped = dict(report.skipped)
    assert compared | set(skipped) == ids and not compared & set(skipped)
    assert "DeepSpeed ZeRO-3 as of 2021" in skipped["megatron21_t2_zero3_174b_384gpu"]
    metrics = {c.metric for c in report.comparisons}
    assert metrics == {"mfu", "tflops_per_gpu"}  # each row by its own FLOP convention


def test_fit_is_deterministic(catalog):
    grid = {"mem_bw": (0.8, 0.9), "attention_bw": (0.7, 0.8), "decode_gemm": (0.6, 1.0), "pcie_efficiency": (0.5,),
            "h100_fp8_gemm": (0.55,)}
    assert fit_serving(SERVING, catalog, grid) == fit_serving(SERVING, catalog, grid)


def test_percentile_matches_numpy_linear():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([0, 10], 90) == 9
    assert percentile([5], 90) == 5


def test_validate_cli_formats(tmp_path):
    runner = CliRunner()
    r = runner.invoke(main, ["validate"])
    assert r.exit_code == 0 and "median" in r.output and "cannot express" in r.output
    assert "serving_runs.csv" in r.output and "training_runs.csv" in r.output
    data = json.loads(runner.invoke(main, ["validate", "--format", "json", "--data", str(SERVING)]).output)
    assert data["summary"]["output_tokens_per_s"]["rows"] >= 200 and data["skipped"]
    train = json.loads(runner.invoke(main, ["validate", "--format", "json", "--data", str(TRAINING)]).output)
    assert train["summary"]["mfu"]["rows"] >= 60 and "megatron21" in train["by_source"]
    lines = runner.invoke(main, ["validate", "--format", "csv"]).output.splitlines()
    assert lines[0].startswith("id,metric,measured,predicted,error")
    bad = tmp_path / "bad.csv"
    bad.write_text("id,model\nx,y\n")
    r = runner.invoke(main, ["validate", "--data", str(bad)])
    assert r.exit_code == 2 and "missing column" in r.output


def test_uncertainty_bands_equal_the_residuals(catalog):
    from optimizer.calibrate import ratio_quantiles

    train = ratio_quantiles(validate_training(TRAINING, catalog, ALIASES))
    serve = ratio_quantiles(validate_serving(SERVING, catalog))
    assert train == catalog.band("train").ratio_quantiles
    assert serve == catalog.band("serve").ratio_quantiles


def test_confidence_costs_more_and_still_meets_the_deadline(tiny_problem):
    runner = CliRunner()
    plain = json.loads(runner.invoke(main, ["solve", str(tiny_problem), "--format", "json"]).output)
    sure = json.loads(runner.invoke(main, ["solve", str(tiny_problem), "--format", "json",
                                           "--confidence", "90"]).output)
    assert sure["problem"]["confidence"] == 90 and sure["uncertainty"]["planning_factor"] < 1
    assert sure["cost"]["tco_usd"] >= plain["cost"]["tco_usd"]
    assert sure["plan"]["planned_days"] <= 30 + 1e-9
    lo, hi = plain["plan"]["days_band_90"]
    assert lo < plain["plan"]["days"] < hi


def test_confidence_must_be_a_calibrated_level(tiny_problem, tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text(tiny_problem.read_text() + "confidence: 85\n")
    r = CliRunner().invoke(main, ["solve", str(bad)])
    assert r.exit_code == 2 and "field 'confidence'" in r.output


def test_estimates_carry_a_band():
    runner = CliRunner()
    t = json.loads(runner.invoke(main, ["estimate", "train", "--model", "llama2-7b", "--gpu", "a100-sxm-80gb",
                                        "--gpus", "8", "--tokens", "1T", "--format", "json"]).output)
    lo, hi = t["band_90"]["tokens_per_s"]
    assert lo < t["tokens_per_s"] < hi and t["band_90"]["days"][0] < t["days"] < t["band_90"]["days"][1]
    s = json.loads(runner.invoke(main, ["estimate", "serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus",
                                        "1", "--input-len", "128", "--output-len", "128", "--format", "json"]).output)
    lo, hi = s["band_90"]["output_tokens_per_s"]
    assert lo < s["output_tokens_per_s"] < hi


def test_gpu_hours_sanity_table(catalog, tmp_path):
    """Predicted GPU-hours beside the published ones; Llama 2 (A100) within a factor 1.5."""
    from optimizer.gpu_hours import gpu_hours

    rows = (default_data_dir() / "gpu_hours.csv").read_text().splitlines()
    small = tmp_path / "llama2.csv"
    small.write_text("\n".join([rows[0]] + [r for r in rows[1:] if r.startswith("llama2")]) + "\n")
    table = gpu_hours(small, catalog)
    assert [r.model for r in table] == ["llama2-7b", "llama2-13b", "llama2-70b"]
    for r in table:
        assert 0.67 < r.ratio < 1.5, (r.model, r.ratio)
        assert r.band[0] < r.predicted < r.band[1] and r.gpus <= 2048
    out = CliRunner().invoke(main, ["gpu-hours", "--data", str(small)]).output
    assert "1,720,320" in out and "llama2-70b" in out
