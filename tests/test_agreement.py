"""The measurements' own disagreement where the model sees the same row (calibration.agreement)."""

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from optimizer.calibration import crossval
from optimizer.calibration.agreement import agreement
from optimizer.cli import main


def test_pairs_of_indistinguishable_rows_are_split_by_source():
    keys = ["a", "a", "a", "b", "b", "c", "d", "d"]
    sources = ["s1", "s2", "s1", "s1", "s1", "s2", "s1", "s2"]
    rates = {0: 100.0, 1: 120.0, 2: 110.0, 3: 50.0, 4: 60.0, 5: 70.0,
             6: 0.0, 7: 80.0}  # row 6 has no rate: row 7 has nothing to pair with
    result = agreement(keys, sources, rates)
    across, within = result.across_sources, result.within_source
    # across: rows 0-1 (120/100) and 1-2 (120/110)
    assert (across.pairs, across.rows) == (2, 3)
    assert across.median == pytest.approx((0.2 + 10 / 110) / 2)
    assert across.p90 == pytest.approx(10 / 110 + 0.9 * (0.2 - 10 / 110))
    # within: rows 0-2 (110/100) and 3-4 (60/50)
    assert (within.pairs, within.rows) == (2, 4)
    assert within.median == pytest.approx(0.15)
    assert within.p90 == pytest.approx(0.19)


def test_no_pairs_gives_no_figures():
    result = agreement(["a", "b"], ["s1", "s1"], {0: 1.0, 1: 2.0})
    for d in (result.across_sources, result.within_source):
        assert (d.pairs, d.rows) == (0, 0) and d.median != d.median and d.p90 != d.p90


def _only(ds, rows):
    """The dataset restricted to ``rows``, its observations renumbered."""
    index = {c.row: i for i, c in enumerate(ds.cases)}
    keep = [index[r] for r in rows]
    return crossval.Dataset(ds.kind, [ds.cases[i] for i in keep], [],
                            [replace(o, case=keep.index(o.case)) for o in ds.observations if o.case in keep])


def test_one_run_in_two_tensorrt_llm_tables_is_paired_and_another_precision_is_not(catalog):
    ds = crossval.load_dataset("serving", catalog)
    # Llama 3.1 8B on one H100 at 128/128: FP8 27,792 tok/s in the 0.15 table and 28,312 in the 1.0
    # one; the 0.15 table's 16-bit engine (16,117 tok/s) is other work on another efficiency
    result = _only(ds, ["trt015-001", "trt10-194", "trt015-002"]).agreement()
    assert (result.across_sources.pairs, result.within_source.pairs) == (1, 0)
    assert result.across_sources.median == pytest.approx(28312 / 27792.16 - 1)
    whole = ds.agreement()
    assert whole.across_sources.pairs >= 30 and whole.within_source.pairs >= 50


def test_a_total_throughput_is_paired_with_an_output_throughput_at_its_output_share(catalog):
    ds = crossval.load_dataset("serving", catalog)
    # Llama 3.1 405B FP8 on 8 MI300X at 500/2000: AMD's blog prints 2,985 output tok/s, ROCm's
    # dev-docker README 2,905.6 (output tokens/s, as serving_runs_3.md reads it)
    pair = _only(ds, ["amd-mi300x-best-013", "rocm-vllm010-007"])
    assert pair.agreement().across_sources.median == pytest.approx(2985 / 2905.6 - 1)
    # had the README printed the same run's total, 2,905.6 × 2,500 / 2,000 tokens/s in and out, the
    # pair would compare its output share, the same rate
    blog, readme = pair.cases
    as_total = replace(readme, measured=(("total_tokens_per_s", 2905.6 * 2500 / 2000),))
    result = crossval.Dataset(pair.kind, [blog, as_total], [], []).agreement()
    assert result.across_sources.pairs == 1
    assert result.across_sources.median == pytest.approx(2985 / 2905.6 - 1)


def test_training_rows_reporting_different_metrics_are_paired_by_step_time(catalog):
    ds = crossval.load_dataset("training", catalog)
    # Llama 3 8B FP8 on 8 H100: NeMo 24.07 prints 12,036 tokens/s a GPU, DGX Cloud's recipe an MFU of
    # 39.63 %; the model predicts each as its scale over one step time
    rows = ["nemo2407_llama3_8b_8gpu_fp8", "dgxcl31_8b_8gpu_fp8"]
    only = _only(ds, rows)
    assert {c.metric for c in only.cases} == {"tokens_per_s_per_gpu", "mfu"}
    rates = [c.measured / c.scale for c in only.cases]
    result = only.agreement()
    assert result.across_sources.pairs == 1
    assert result.across_sources.median == pytest.approx(max(rates) / min(rates) - 1)
    assert result.across_sources.median < 0.2  # the same run in two units, not 12,036 against 0.40
    assert ds.agreement().across_sources.pairs >= 10


def test_validate_prints_the_measurements_own_disagreement():
    runner = CliRunner()
    text = runner.invoke(main, ["validate", "--kind", "serving"]).output
    assert "measured by two sources" in text and "measured twice by one source" in text
    data = json.loads(runner.invoke(main, ["validate", "--kind", "serving", "--format", "json"]).output)
    across = data["serving"]["agreement"]["across_sources"]
    assert across["pairs"] >= 30 and 0 < across["median"] <= across["p90"]
