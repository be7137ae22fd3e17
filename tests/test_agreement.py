"""The measurements' own disagreement where the model sees the same row (calibration.agreement)."""

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from optimizer.calibration import crossval
from optimizer.calibration.agreement import agreement
from optimizer.cli import main


def test_pairs_of_indistinguishable_rows_are_split_by_source_and_latencies_left_out():
    keys = ["a", "a", "a", "b", "b", "c"]
    sources = ["s1", "s2", "s1", "s1", "s1", "s2"]
    measured = [(0, "output_tokens_per_s", 100.0), (1, "output_tokens_per_s", 120.0),
                (2, "output_tokens_per_s", 110.0), (3, "output_tokens_per_s", 50.0),
                (4, "output_tokens_per_s", 60.0), (5, "output_tokens_per_s", 70.0),
                (0, "ttft_ms", 10.0), (1, "ttft_ms", 40.0),  # latencies are not paired
                (4, "total_tokens_per_s", 90.0)]  # nor one metric with another
    result = agreement(keys, sources, measured)
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
    result = agreement(["a", "b"], ["s1", "s2"], [(0, "output_tokens_per_s", 1.0), (1, "output_tokens_per_s", 2.0)])
    assert result.across_sources.pairs == 0 and result.across_sources.median != result.across_sources.median


def test_the_same_run_in_two_tensorrt_llm_tables_is_one_prediction_for_two_measurements(catalog):
    ds = crossval.load_dataset("serving", catalog)
    index = {c.row: i for i, c in enumerate(ds.cases)}
    # Llama 3.1 8B FP8 on one H100 at 128/128: 27,792 tok/s in the 0.15 table, 28,312 in the 1.0 one
    old, new = ds.cases[index["trt015-001"]], ds.cases[index["trt10-194"]]
    assert old.terms == new.terms and ds.contexts[index["trt015-001"]] == ds.contexts[index["trt10-194"]]
    both = [index["trt015-001"], index["trt10-194"]]
    only = crossval.Dataset(ds.kind, [ds.cases[i] for i in both], [],
                            [replace(o, case=both.index(o.case)) for o in ds.observations if o.case in both])
    result = only.agreement()
    assert result.across_sources.pairs == 1 and result.within_source.pairs == 0
    assert result.across_sources.median == pytest.approx(28312 / 27792.16 - 1)
    whole = ds.agreement()
    assert whole.across_sources.pairs >= 20 and whole.within_source.pairs >= 50


def test_validate_prints_the_measurements_own_disagreement():
    runner = CliRunner()
    text = runner.invoke(main, ["validate", "--kind", "serving"]).output
    assert "measured by two sources" in text and "measured twice by one source" in text
    data = json.loads(runner.invoke(main, ["validate", "--kind", "serving", "--format", "json"]).output)
    across = data["serving"]["agreement"]["across_sources"]
    assert across["pairs"] >= 20 and 0 < across["median"] <= across["p90"]
