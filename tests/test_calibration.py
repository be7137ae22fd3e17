"""The model against published runs: every row accounted for, parameters that no single row keys,
a fit that reproduces the catalog, out-of-source accuracy that does not regress, honest bands."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from dataclasses import replace

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import optimizer as go
from optimizer.calibration import crossval
from optimizer.calibration.bands import QUANTILE_DECIMALS, coverage, ratio_quantiles
from optimizer.calibration.data import (
    data_files,
    default_data_dir,
    load_aliases,
    load_sources,
    percentile,
    source_of,
)
from optimizer.calibration.fit import MIN_ROWS
from optimizer.catalog import AT_BATCH, AT_MAX_LOAD, load_catalog
from optimizer.catalog.records import DENSE, MOE
from optimizer.catalog.stacks import efficiency_precision
from optimizer.cli import main
from optimizer.errors import CatalogError
from optimizer.perf.params import ServeParams
from optimizer.problem import Demand, answer_regime, confidence_factor, load_problem, serve_regime
from tests.conftest import ROOT

DATA = default_data_dir()


@pytest.fixture(scope="module")
def datasets(catalog):
    return {kind: crossval.load_dataset(kind, catalog) for kind in ("training", "serving")}


@pytest.fixture(scope="module")
def validations(datasets, catalog):
    """Leave-one-source-out for both kinds (the slow part: shared by the tests below)."""
    return {kind: crossval.cross_validate(ds, catalog) for kind, ds in datasets.items()}


def _ids(files):
    out = []
    for name in files:
        if (DATA / name).exists():
            with (DATA / name).open(encoding="utf-8") as f:
                out += [row["id"] for row in csv.DictReader(f)]
    return out


def test_every_row_is_compared_or_explained(datasets):
    for kind, files in (("training", data_files("training")), ("serving", data_files("serving"))):
        ids = _ids(files)
        assert len(ids) == len(set(ids)), f"duplicate {kind} row ids"
        expressed = {c.row for c in datasets[kind].cases}
        skipped = {r for r, _, _ in datasets[kind].skipped}
        assert expressed | skipped == set(ids) and not expressed & skipped
        assert all(why for _, _, why in datasets[kind].skipped)


def test_every_calibration_file_is_read_in_number_order(tmp_path):
    """A new serving_runs_N.csv is read once it is there, after the ones numbered below it (the
    fit's row order, and so its result, does not depend on the directory listing)."""
    for name in ("serving_runs_10.csv", "serving_runs.csv", "serving_runs_2.csv", "serving_runs_notes.csv",
                 "training_runs_3.csv"):
        (tmp_path / name).write_text("")
    assert data_files("serving", tmp_path) == ("serving_runs.csv", "serving_runs_2.csv", "serving_runs_10.csv")
    assert data_files("training", tmp_path) == ("training_runs_3.csv",)
    shipped = data_files("serving")
    assert shipped[0] == "serving_runs.csv" and len(shipped) == len(list(DATA.glob("serving_runs*.csv")))


def test_every_row_has_one_listed_source_and_every_source_rows():
    sources = load_sources()
    assert len({s.id for s in sources}) == len(sources)
    used = set()
    for kind, files in (("training", data_files("training")), ("serving", data_files("serving"))):
        for row in _ids(files):
            s = source_of(row, sources)
            assert s is not None and s.kind == kind, row
            used.add(s.id)
    assert used == {s.id for s in sources}
    listed = (DATA / "SOURCES.md").read_text(encoding="utf-8").splitlines()
    for s in sources:
        assert sum(line.startswith(f"| {s.id} |") for line in listed) == 1, s.id


def test_training_rows_are_compared_on_tokens_per_second_where_published(datasets):
    """Tokens/s per GPU is measured; MFU and TFLOP/s are derived with each source's own FLOP formula
    (InternEvo's counts the recomputed forward, Megatron-Bridge does not print its MoE formula), so a
    row that gives tokens/s is compared on it, and only the others on what they give."""
    cases = {c.row: c for c in datasets["training"].cases}
    for row in ("internevo_7b_a100_8gpu_ckpt1_mb8x1_gbs0p125M", "mbridge2602_gb200_gptoss120b_64gpu_bf16"):
        assert cases[row].metric == "tokens_per_s_per_gpu", row
    assert cases["megatron21_t2_ptdp_174b_384gpu"].metric == "tflops_per_gpu"  # the paper prints TFLOP/s only
    # its tokens/s cell contradicts its TFLOP/s (a typo, notes): sources.yaml names the metric to trust
    assert cases["mbridge2602_h100_qwen3_30b_16gpu_fp8cs"].metric == "tflops_per_gpu"


def test_names_map_to_catalog_ids(catalog):
    aliases = load_aliases()
    assert set(aliases.models.values()) <= set(catalog.models)
    for place in aliases.gpus.values():
        assert place.gpu in catalog.gpus, place.gpu
    assert set(aliases.engines.values()) <= set(catalog.efficiency.engines)
    for s in load_sources():
        table = catalog.efficiency.stacks if s.kind == "training" else catalog.efficiency.engines
        assert s.stack in table, s.id


def test_no_parameter_is_keyed_to_a_single_row(datasets, catalog):
    """Every family, precision or stack value in catalogs/efficiency.yaml rests on at least
    MIN_ROWS calibration rows that depend on it, counted again from the data."""
    sens = {kind: crossval.sensitivity(ds, catalog) for kind, ds in datasets.items()}
    eff = catalog.efficiency
    for kind, ds in datasets.items():
        table = eff.table.training if kind == "training" else eff.table.serving
        for name, p in table.items():
            for key, value in list(p.hardware.items()) + list(p.stacks.items()):
                assert value.rows >= MIN_ROWS, (kind, name, key, value.rows)
            for key in p.hardware:
                family, _, precision = key.partition("/")
                rows = sum(1 for c, s in zip(ds.cases, sens[kind][name], strict=True)
                           if s and family in eff.family_chain(c.family)
                           and precision in ("", efficiency_precision(c.precision)))
                assert rows >= MIN_ROWS, (kind, name, key, rows)
            for key in p.stacks:  # a stack ("vllm"), on a GPU family ("trtllm@hopper"), at a precision too
                rows = sum(1 for c, s in zip(ds.cases, sens[kind][name], strict=True)
                           if s and key in eff.param_stack_keys(kind, p, c.stack, c.family, c.precision))
                assert rows >= MIN_ROWS, (kind, name, key, rows)


def _same_numbers(fitted, shipped, where: str = "") -> None:
    """Same keys and strings; numbers within 0.5 %, and a band quantile also within one unit of the
    decimal it is written to (``bands.QUANTILE_DECIMALS``: the fit's 0.0995 is written 0.099 or 0.1
    as its fifth digit moves): the optimiser's last digits move with the numpy/scipy release, the fit
    does not (one environment writes the same bytes every time)."""
    if isinstance(fitted, dict):
        assert isinstance(shipped, dict) and fitted.keys() == shipped.keys(), where
        for key in fitted:
            _same_numbers(fitted[key], shipped[key], f"{where}.{key}")
    elif isinstance(fitted, list):
        assert isinstance(shipped, list) and len(fitted) == len(shipped), where
        for i, (a, b) in enumerate(zip(fitted, shipped, strict=True)):
            _same_numbers(a, b, f"{where}[{i}]")
    elif isinstance(fitted, float | int) and not isinstance(fitted, bool):
        digit = 1.001 * 10.0 ** -QUANTILE_DECIMALS if ".ratio_quantiles." in where else 1e-12
        assert shipped == pytest.approx(fitted, rel=5e-3, abs=digit), where
    else:
        assert fitted == shipped, where


def test_the_catalog_holds_what_the_fit_produces(validations, datasets, catalog):
    """`gpuopt fit` reproduces catalogs/efficiency.yaml and catalogs/uncertainty.yaml (deterministic)."""
    from optimizer.calibration import write

    fits = {k: (v.fit, datasets[k], v.sensitivity) for k, v in validations.items()}
    text = write.efficiency_yaml(catalog.efficiency.table, fits, catalog.efficiency.table.fitted)
    _same_numbers(yaml.safe_load(text), yaml.safe_load((catalog.root / "efficiency.yaml").read_text(encoding="utf-8")))
    _same_numbers(yaml.safe_load(write.uncertainty_yaml(validations)),
                  yaml.safe_load((catalog.root / "uncertainty.yaml").read_text(encoding="utf-8")))
    assert write.sources_markdown(load_sources(), datasets) == (DATA / "SOURCES.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", ["training", "serving"])
def test_the_catalog_predicts_what_the_fit_predicts(validations, datasets, catalog, kind):
    """What a user gets (the catalog's values, resolved per GPU family and stack) is what the fit
    found: every row within 1 %. A value written too coarsely (an overhead of 20 µs rounded to 0)
    or resolved through another chain than the fit's would show here."""
    fitted = {(c.row, c.metric): c.predicted for c in validations[kind].in_sample}
    shipped = crossval.with_catalog(datasets[kind], catalog).in_sample
    off = [(c.row, c.metric, c.predicted, fitted[(c.row, c.metric)]) for c in shipped
           if c.predicted != pytest.approx(fitted[(c.row, c.metric)], rel=0.01)]
    assert not off, off[:5]


def _median_p90(comparisons):
    errs = [abs(c.error) for c in comparisons]
    return np.median(errs), percentile(errs, 90)


# Out-of-source accuracy today (gpuopt validate --cv source, 2026-11-28: training 350 rows from 23
# sources, median 9.1 % / p90 23.2 %; serving 1,817 rows from 27 sources, 14.4 % / 49.4 %), with a
# small margin: regression guards. LLM-Inference-Bench's 239 rows of vLLM 0.6.1 on MI300X, an engine
# release no other source ran, are still 24 % / 74 % off out of source (53 % median before earlier
# releases took their successor's host overheads times the fitted release ratio) and set much of the p90.
# Issue 13's targets (training median 10 % / p90 25 %, met; serving 10 % / 30 %, not yet) are in the
# README beside the figures reached.
GUARDS = {"training": (0.10, 0.25), "serving": (0.16, 0.60)}


@pytest.mark.parametrize("kind", ["training", "serving"])
def test_out_of_source_accuracy_does_not_regress(validations, kind):
    v = validations[kind]
    main_rows = [c for c in v.out_of_source if c.metric not in ("ttft_ms", "tpot_ms")]
    assert len({c.source for c in main_rows}) >= 12
    median, p90 = _median_p90(main_rows)
    assert median <= GUARDS[kind][0] and p90 <= GUARDS[kind][1], (median, p90)
    inside, _ = _median_p90([c for c in v.in_sample if c.metric not in ("ttft_ms", "tpot_ms")])
    assert inside <= median + 1e-9  # fitting what you predict is easier: out-of-source is the honest figure


def test_bands_cover_new_sources_and_widen_for_extrapolation(validations, catalog):
    for kind, v in validations.items():
        cov = coverage(list(v.out_of_source))
        # issue 13's target is 85 %; each band is judged on rows it never saw, built and widened without them
        assert cov["all"] >= 0.85, (kind, cov)
        assert min(cov["calibrated"], cov["extrapolated"]) >= 0.75, (kind, cov)
        for regime in ((AT_BATCH, AT_MAX_LOAD) if kind == "serving" else (DENSE, MOE)):
            assert cov[f"band: {regime}"] >= 0.85, (regime, cov)
            band, calibrated = catalog.band(kind, True, regime), catalog.band(kind, False, regime)
            assert band.ratio(5) <= calibrated.ratio(5) and band.ratio(95) >= calibrated.ratio(95)


def test_moe_training_takes_a_band_of_its_own(catalog, validations):
    """Mixture-of-experts steps are predicted far less well out of source than dense ones (16-30 %
    median against 6-10 %): one band over both covered 60 % of new MoE sources' rows. Each now takes
    the band of the rows measured like it, and an MoE estimate prints the wider one."""
    dense, moe = catalog.band("train", False, DENSE), catalog.band("train", False, MOE)
    assert moe.ratio(5) < dense.ratio(5) and moe.ratio(95) > dense.ratio(95)
    rows = [c for c in validations["training"].out_of_source if c.regime.startswith("moe")]
    assert len({c.source for c in rows}) >= 3 and coverage(rows)["all"] >= 0.85
    mixtral = go.estimate_train("mixtral-8x7b", "h100-sxm", 8, catalog, ep=8, zero=3)
    llama = go.estimate_train("llama2-7b", "h100-sxm", 8, catalog)
    low, high = (e.data["band_90"]["tokens_per_s"] for e in (mixtral, llama))
    rate = mixtral.data["tokens_per_s"], llama.data["tokens_per_s"]
    assert low[0] / rate[0] < high[0] / rate[1] and low[1] / rate[0] > high[1] / rate[1]


def test_serving_bands_follow_the_regime_a_replica_is_planned_in(catalog):
    """A class with a latency limit is planned at a batch, one without at maximum load: each takes the
    band of the published rows measured like it, which differ (bands.py), and a regime the file does
    not split falls back to the band of every row."""
    at_batch, at_max = catalog.band("serve", False, AT_BATCH), catalog.band("serve", False, AT_MAX_LOAD)
    assert at_batch.ratio_quantiles != at_max.ratio_quantiles
    at_batch = catalog.band("serve", False, AT_BATCH, "NVIDIA")  # an H100 takes NVIDIA's band (bands.py)
    assert catalog.band("serve", False, "no such regime") == catalog.band("serve")
    assert catalog.band("train", False, AT_BATCH) == catalog.band("train")
    limited = Demand("chat", 512, 256, 1000.0, None, 0.05)
    free = Demand("batch", 512, 256, 1000.0, None, None)
    assert serve_regime(limited) == AT_BATCH and serve_regime(free) == AT_MAX_LOAD
    assert answer_regime((limited,)) == AT_BATCH and answer_regime((limited, free)) == AT_MAX_LOAD
    runner = CliRunner()
    args = ["estimate", "serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "1", "--input-len", "1000",
            "--output-len", "500", "--format", "json"]
    fixed = json.loads(runner.invoke(main, [*args, "--batch", "32"]).output)
    saturated = json.loads(runner.invoke(main, args).output)
    assert fixed["band_90"]["regime"] == AT_BATCH and saturated["band_90"]["regime"] == AT_MAX_LOAD
    lo, hi = fixed["band_90"]["output_tokens_per_s"]
    assert lo == pytest.approx(fixed["output_tokens_per_s"] * at_batch.ratio(5))
    assert hi == pytest.approx(fixed["output_tokens_per_s"] * at_batch.ratio(95))


def test_widening_is_the_least_that_covers_sources_left_out():
    """Five sources whose ratios sit at 0.8, 0.9, 1.0, 1.1 and 1.25: unwidened, the band of any four
    misses the fifth's ratio when it is an extreme; the chosen widening is the least on the grid at
    which the left-out rows are covered as often as the nominal share, and never below 1."""
    from optimizer.calibration.bands import NOMINAL, WIDENING, bands, widening_for
    from optimizer.calibration.data import Comparison

    rows = [Comparison(f"{s}{i}", s, "maximum load", "", "output_tokens_per_s", m * (1 + 0.01 * i), 1.0)
            for s, m in zip("abcde", (0.8, 0.9, 1.0, 1.1, 1.25), strict=True) for i in range(4)]
    widening = widening_for(rows)
    cell = f"{AT_MAX_LOAD}/calibrated"  # the band these rows are judged by
    assert bands(rows, widening)["widening"] == widening and bands(rows)["widening"] == widening
    hits = coverage(rows)
    assert 0.0 <= hits["all"] <= 1.0
    from optimizer.calibration.bands import SIDES, _hits

    tail = 1 - (1 - NOMINAL) / 2  # each side may miss half of what the band may
    for side in SIDES:  # a factor below the median and one above it, each the least that covers its side
        key = f"{cell}/{side}"
        k = widening[key]
        assert k in WIDENING and k >= 1.0 and widening[f"calibrated/{side}"] == k
        at_k = _hits(rows, lambda others: bands(others, widening), side=side)
        assert sum(at_k[cell]) / len(at_k[cell]) >= tail
        if k > WIDENING[0]:
            step = {**widening, key: WIDENING[WIDENING.index(k) - 1]}
            below = _hits(rows, lambda others, step=step: bands(others, step), side=side)
            assert sum(below[cell]) / len(below[cell]) < tail  # the grid step below did not cover enough
    # five sources spread like these need a wider band than their plain quantiles
    assert max(widening[f"{cell}/{side}"] for side in SIDES) > WIDENING[0]


def test_each_group_is_widened_for_its_own_sources():
    """An extrapolated source far off (an engine release no other source measured) widens the
    extrapolated band, not the band of calibrated predictions (Mondrian conformal, FIDELITY.md
    section 3)."""
    from optimizer.calibration.bands import bands, widening_for
    from optimizer.calibration.data import Comparison

    def rows(extrapolated: tuple[str, ...], spread: tuple[float, ...], prefix: str) -> list[Comparison]:
        return [Comparison(f"{prefix}{s}{i}", f"{prefix}{s}", "maximum load", "", "output_tokens_per_s",
                           m * (1 + 0.01 * i), 1.0, extrapolated)
                for s, m in zip("abcde", spread, strict=True) for i in range(4)]

    calibrated = rows((), (0.9, 0.95, 1.0, 1.05, 1.1), "c")
    tame = rows(("stack x",), (0.9, 0.95, 1.0, 1.05, 1.1), "e")
    wild = rows(("stack x",), (0.3, 0.6, 1.0, 1.6, 3.0), "e")
    with_tame, with_wild = widening_for(calibrated + tame), widening_for(calibrated + wild)
    for side in ("low", "high"):
        assert with_wild[f"calibrated/{side}"] == with_tame[f"calibrated/{side}"]
        assert with_wild[f"extrapolated/{side}"] >= with_tame[f"extrapolated/{side}"]
    band_tame, band_wild = bands(calibrated + tame), bands(calibrated + wild)
    assert band_wild["calibrated"] == band_tame["calibrated"]
    wide, narrow = band_wild["extrapolated"]["ratio_quantiles"], band_tame["extrapolated"]["ratio_quantiles"]
    assert wide[5] < narrow[5] and wide[95] > narrow[95]


def test_one_vendors_wild_engine_release_does_not_widen_another_vendors_serving_band():
    """Serving bands are kept per GPU vendor within a regime: AMD rows a quarter of the prediction
    (vLLM 0.6 on ROCm) widen AMD's band, not NVIDIA's; a vendor with fewer than three sources in a
    regime takes the regime's band of every vendor, and so does a prediction for a vendor without
    rows."""
    from optimizer.calibration.bands import band_of, bands
    from optimizer.calibration.data import Comparison

    def rows(vendor: str, spread: tuple[float, ...]) -> list[Comparison]:
        return [Comparison(f"{vendor}{s}{i}", f"{vendor}{s}", "fixed batch or concurrency", "", "output_tokens_per_s",
                           m * (1 + 0.01 * i), 1.0, (), vendor)
                for s, m in zip("abcd", spread, strict=True) for i in range(4)]

    nvidia, amd = rows("NVIDIA", (0.9, 0.95, 1.05, 1.1)), rows("AMD", (0.25, 0.3, 1.0, 1.1))
    found = bands(nvidia + amd)
    own = found["vendors"]["NVIDIA"]["regimes"][AT_BATCH]["calibrated"]["ratio_quantiles"]
    pooled = found["regimes"][AT_BATCH]["calibrated"]["ratio_quantiles"]
    assert own[5] > 0.8 > pooled[5] and band_of(found, nvidia[0]) == own
    assert band_of(found, amd[0])[5] < 0.35
    intel = rows("Intel", (0.9, 1.1, 1.0, 1.0))[:8]  # two sources: too few for a band of its own
    assert bands(nvidia + amd + intel)["vendors"]["Intel"]["regimes"][AT_BATCH]["calibrated"]["sources"] == 10
    shipped = load_catalog()
    h100, mi300x = (shipped.band("serve", False, AT_BATCH, shipped.vendor_of(g)) for g in ("h100-sxm", "mi300x"))
    assert shipped.band("serve", False, AT_BATCH, "nobody") == shipped.band("serve", False, AT_BATCH)
    assert h100.ratio(10) > mi300x.ratio(10)

def test_weighted_quantiles_weigh_sources_not_rows():
    from optimizer.calibration.data import Comparison

    many = [Comparison(f"a{i}", "big", "r", "", "mfu", 1.0, 1.0) for i in range(100)]
    few = [Comparison("b", "small", "r", "", "mfu", 2.0, 1.0)]
    q = ratio_quantiles(many + few)
    assert q[95] == pytest.approx(2.0)  # one source of one row still holds half the weight
    assert q[5] == pytest.approx(1.0)


def test_percentile_matches_numpy_linear():
    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 40):
        values = list(rng.lognormal(size=n))
        for q in (5, 50, 90, 95):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_leaving_sources_out_in_parallel_gives_the_same_fits(datasets, catalog):
    """`gpuopt fit` and `validate --cv source` spread the fits over processes: each fit is the one
    the serial loop makes (four training sources here, to keep it quick), and the progress line
    names every source left out, in order."""
    ds = datasets["training"]
    keep = sorted({c.source for c in ds.cases})[:4]
    index = {old: new for new, old in enumerate(i for i, c in enumerate(ds.cases) if c.source in keep)}
    small = crossval.Dataset(ds.kind, [ds.cases[i] for i in index], [],
                             [replace(o, case=index[o.case]) for o in ds.observations if o.case in index], ds.vendors)
    told: list[str] = []
    serial = crossval.cross_validate(small, catalog, lambda k, source: told.append(source))
    parallel = crossval.cross_validate(small, catalog, workers=2)
    assert told == keep
    assert serial.in_sample == parallel.in_sample and serial.out_of_source == parallel.out_of_source
    assert serial.fit is not None and parallel.fit is not None and np.array_equal(serial.fit.x, parallel.fit.x)


def test_validate_cli_formats():
    runner = CliRunner()
    r = runner.invoke(main, ["validate", "--kind", "training"])
    assert r.exit_code == 0 and "median" in r.output and "by source" in r.output
    data = json.loads(runner.invoke(main, ["validate", "--kind", "serving", "--format", "json"]).output)
    assert data["serving"]["expressed_rows"] >= 500 and data["serving"]["skipped"]
    labels = {line["label"] for line in data["serving"]["lines"]}
    assert {"maximum load", "fixed batch or concurrency", "TTFT", "TPOT"} <= labels
    lines = runner.invoke(main, ["validate", "--format", "csv"]).output.splitlines()
    assert lines[0].startswith("kind,id,source,regime,metric,measured")
    rows = runner.invoke(main, ["validate", "--kind", "training", "--rows"]).output
    assert "cannot express" in rows and "DeepSpeed ZeRO-3 as of 2021" in rows


def test_calibrated_rows_are_reported_per_regime_on_the_same_rows_in_sample(validations):
    """A buyer whose GPU and engine other sources measured sees their accuracy per regime; each
    line's in-sample figures are over the very rows of its out-of-source ones (a row is
    extrapolated only out of source, so grouping the in-sample comparisons by it would not be)."""
    from optimizer.calibration.render import summary

    v = validations["serving"]
    lines = {(line["section"], line["label"]): line for line in summary(v)["lines"]}
    calibrated = lines[("calibrated, by regime", "fixed batch or concurrency")]
    assert 0 < calibrated["rows"] < lines[("by regime", "fixed batch or concurrency")]["rows"]
    rows = {(c.row, c.metric) for c in v.out_of_source if not c.extrapolated
            and c.regime == "fixed batch or concurrency" and c.metric in ("output_tokens_per_s", "total_tokens_per_s")}
    in_sample = [abs(c.error) for c in v.in_sample if (c.row, c.metric) in rows]
    assert len(in_sample) == len(rows) == calibrated["rows"]
    assert calibrated["in_sample"]["median"] == pytest.approx(float(np.median(in_sample)))
    assert calibrated["coverage_90"] is not None
    extrapolated = lines[("by calibration", "extrapolated")]["in_sample"]["median"]
    assert extrapolated == extrapolated  # the extrapolated rows have in-sample figures too (not NaN)


def test_estimates_name_the_stack_and_carry_a_band():
    runner = CliRunner()
    t = json.loads(runner.invoke(main, ["estimate", "train", "--model", "llama2-7b", "--gpu", "a100-sxm-80gb",
                                        "--gpus", "8", "--tokens", "1T", "--format", "json"]).output)
    lo, hi = t["band_90"]["tokens_per_s"]
    assert lo < t["tokens_per_s"] < hi and t["band_90"]["days"][0] < t["days"] < t["band_90"]["days"][1]
    assert t["stack"] == "megatron-core" and t["stack_default"]
    fsdp = json.loads(runner.invoke(main, ["estimate", "train", "--model", "llama2-7b", "--gpu", "a100-sxm-80gb",
                                           "--gpus", "8", "--stack", "fsdp", "--format", "json"]).output)
    assert fsdp["stack"] == "pytorch-fsdp" and not fsdp["stack_default"]
    assert fsdp["tokens_per_s"] != t["tokens_per_s"]
    text = runner.invoke(main, ["estimate", "train", "--model", "llama2-7b", "--gpu", "a100-sxm-80gb", "--gpus",
                                "8"]).output
    assert "training stack: megatron-core" in text and "90 % band" in text
    s = json.loads(runner.invoke(main, ["estimate", "serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus",
                                        "1", "--input-len", "128", "--output-len", "128", "--format", "json"]).output)
    lo, hi = s["band_90"]["output_tokens_per_s"]
    assert lo < s["output_tokens_per_s"] < hi and s["engine"] == "vllm"
    bad = runner.invoke(main, ["estimate", "serve", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "1",
                               "--input-len", "128", "--output-len", "128", "--engine", "vlm"])
    assert bad.exit_code == 2 and "vllm" in bad.output


def test_intel_training_is_calibrated_on_gaudi2_and_borrowed_on_gaudi3():
    """Intel's published Gaudi 2 runs (Megatron-DeepSpeed fork, FP8) calibrate the Intel default stack;
    Gaudi 3 has no rows of its own, takes Gaudi 2's values and says so."""
    runner = CliRunner()
    args = ["estimate", "train", "--model", "llama2-7b", "--tokens", "1T", "--format", "json"]
    g2 = json.loads(runner.invoke(main, [*args, "--gpu", "gaudi2", "--gpus", "8", "--precision", "fp8"]).output)
    g3 = json.loads(runner.invoke(main, [*args, "--gpu", "gaudi3", "--gpus", "16"]).output)
    assert g2["stack"] == g3["stack"] == "megatron-deepspeed-gaudi" and g2["stack_default"]
    assert not g2["extrapolated"] and g3["extrapolated"] == ["GPU family gaudi3"]
    # Intel: 68,464-70,523 tokens/s on 8 x Gaudi 2 (LLaMA 2 7B, FP8, seq 4096; SynapseAI 1.18-1.19)
    assert g2["tokens_per_s"] == pytest.approx(69_500, rel=0.15)

    def width(r: dict) -> float:
        lo, hi = r["band_90"]["tokens_per_s"]
        return (hi - lo) / r["tokens_per_s"]

    # extrapolated: the out-of-source spread of predictions that borrowed values, never narrower
    # than the calibrated band (bands.py); equal where borrowing missed no more than calibration did
    assert width(g3) >= width(g2) - 1e-9


def test_catalog_lists_stacks_with_their_rows_and_vendor_defaults(catalog):
    runner = CliRunner()
    text = runner.invoke(main, ["catalog", "list", "--kind", "stacks"]).output
    line = next(ln for ln in text.splitlines() if ln.startswith("megatron-core "))
    assert "NVIDIA" in line and int(line.split()[1]) == catalog.efficiency.table.support["training"].stacks[
        "megatron-core"]
    engines = json.loads(runner.invoke(main, ["catalog", "list", "--kind", "engines", "--format", "json"]).output)
    by_id = {e["id"]: e for e in engines}
    assert by_id["vllm"]["default_for"] == ["NVIDIA", "Intel"] and by_id["vllm"]["calibration_rows"] > 0
    rows = catalog.efficiency.table.support["serving"].stacks
    assert by_id["sglang-rocm"]["calibration_rows"] == rows["sglang-rocm"] == 11  # the SGLang Cookbook's MI300X rows
    assert by_id["sglang-rocm"]["like"] == "sglang"
    assert all(e["calibration_rows"] == rows.get(e["id"], 0) for e in engines)


def test_engine_kernel_efficiencies_are_looked_up_per_gpu_family(catalog):
    """An engine's kernel efficiencies may differ by architecture (``trtllm@hopper``) and, on it,
    by precision (``trtllm@hopper/fp8``): the lookup tries the engine on the GPU's family at the
    precision, on the family, then the families it is like, then the engine alone, then the engine
    it is like; CPU-side overheads and training stacks never go by family."""
    eff = catalog.efficiency
    assert eff.stack_keys("serving", "trtllm-0.6", "blackwell", True) == [
        "trtllm-0.6@blackwell", "trtllm-0.6@hopper", "trtllm-0.6", "trtllm@blackwell", "trtllm@hopper", "trtllm"]
    assert eff.stack_keys("serving", "trtllm", "blackwell", True, "fp8") == [
        "trtllm@blackwell/fp8", "trtllm@blackwell", "trtllm@hopper/fp8", "trtllm@hopper", "trtllm"]
    assert eff.stack_keys("serving", "trtllm", "hopper", False) == ["trtllm"]
    gemm = eff.table.serving["gemm"]
    assert eff.param_stack_keys("serving", gemm, "trtllm", "hopper", "fp16")[0] == "trtllm@hopper/bf16"
    keys = dict((name, stack) for name, _, stack in eff.resolve("serving", "hopper", "fp8", "trtllm").keys)
    assert keys["gemm"] == "trtllm@hopper/fp8" and keys["step_overhead"] == "trtllm"
    assert keys["gemm_half_width"] == ""  # no stack values: a hardware value alone
    # an FP8 and a 16-bit run of one engine on one GPU read different kernel efficiencies
    fp8 = eff.resolve("serving", "hopper", "fp8", "trtllm").params
    bf16 = eff.resolve("serving", "hopper", "bf16", "trtllm").params
    assert fp8.gemm != bf16.gemm and fp8.step_overhead == bf16.step_overhead
    assert all("@" not in key for p in eff.table.training.values() for key in p.stacks)


def test_an_engine_release_may_run_below_the_range_its_gpu_family_keeps(catalog):
    """A GPU family's value of prefill GEMM efficiency stays in the parameter's range; an engine's
    multiplier may take the product down to ``stack_floor``, as vLLM 0.6 on ROCm prefilled at 6-7 %
    of MI300X's dense peak where TGI on the same GPUs reached 20 %. A parameter without a floor of its
    own (training's GEMM efficiency) keeps its range. The fit and the catalog lookup clamp alike."""
    import numpy as np

    from optimizer.calibration import fit as fitting
    from optimizer.catalog.efficiency_table import MULTIPLIER_RANGE

    eff = catalog.efficiency
    gemm = eff.table.serving["gemm"]
    lo, hi = gemm.range

    def with_values(family_value: float, engine_multiplier: float):
        param = gemm.model_copy(update={
            "hardware": {**gemm.hardware, "cdna3/bf16": gemm.hardware["cdna3/bf16"].model_copy(
                update={"value": family_value})},
            "stacks": {**gemm.stacks, "vllm-rocm-0.6.1@cdna3/bf16": gemm.stacks[
                "vllm-rocm-0.6.1@cdna3/bf16"].model_copy(update={"value": engine_multiplier})}})
        table = eff.table.model_copy(update={"serving": {**eff.table.serving, "gemm": param}})
        return replace(eff, table=table).resolve("serving", "cdna3", "bf16", "vllm-rocm-0.6.1").params.gemm

    assert with_values(lo, 0.4) == pytest.approx(0.4 * lo)  # below the range, by the engine's multiplier
    assert gemm.stack_floor == pytest.approx(lo * MULTIPLIER_RANGE[0])
    assert with_values(lo, 0.01) == pytest.approx(gemm.stack_floor)  # no lower than its floor
    assert with_values(hi, 1.5) == pytest.approx(hi)
    # the fit's gather: a family's own slot is bounded by the range, the product by range × multiplier
    contexts = [("cdna3", "bf16", "vllm-rocm-0.6.1")] * 3 + [("cdna3", "bf16", "vllm")] * 3
    layout = fitting.Layout("serving", eff, contexts, {name: np.ones(6, dtype=bool) for name in eff.table.serving},
                            list(range(6)))
    x = np.array([s.lo if s.key.startswith(("hw:", "default")) else 1.0 for s in layout.slots])
    assert layout.values(x)["gemm"] == pytest.approx(np.full(6, lo))
    release = layout.stack_index["gemm"][0]
    x[release] = layout.slots[release].lo
    assert layout.slots[release].lo == MULTIPLIER_RANGE[0]
    assert layout.values(x)["gemm"] == pytest.approx([gemm.stack_floor] * 3 + [lo] * 3)
    train = eff.table.training["gemm"]
    assert train.multiply and train.stack_floor is None
    low = train.model_copy(update={"stacks": {**train.stacks, "torchtitan": train.stacks["torchtitan"].model_copy(
        update={"value": 0.2})}, "hardware": {k: v.model_copy(update={"value": train.range[0]})
                                              for k, v in train.hardware.items()}})
    table = eff.table.model_copy(update={"training": {**eff.table.training, "gemm": low}})
    assert replace(eff, table=table).resolve("training", "hopper", "bf16", "torchtitan").params.gemm == pytest.approx(
        train.range[0])


def test_fp16_and_bf16_share_their_efficiency_values(catalog, datasets):
    """One tensor-core rate, one set of kernels: an FP16 run reads (and is fitted into) the bf16 value
    of its GPU family, for training and serving alike, and no fp16 value is stored."""
    eff = catalog.efficiency
    for kind, family, stack in (("serving", "cdna3", "vllm-rocm-0.6"), ("training", "ampere", "megatron-lm")):
        assert eff.resolve(kind, family, "fp16", stack) == eff.resolve(kind, family, "bf16", stack)  # type: ignore[arg-type]
        table = eff.table.training if kind == "training" else eff.table.serving
        assert not [k for p in table.values() for k in p.hardware if k.endswith("/fp16")]
        assert f"{family}/bf16" in table["gemm"].hardware
    ceilings = eff.table.mfu_ceiling  # the MFU ceiling too: the best FP16 or BF16 run on the family
    assert ceilings is not None and not [k for k in ceilings.hardware if k.endswith("/fp16")]
    assert catalog.mfu_ceiling("a100-sxm-80gb", "fp16") == catalog.mfu_ceiling("a100-sxm-80gb", "bf16")
    contexts = datasets["serving"].contexts
    assert any(c.precision == "fp16" for c in datasets["serving"].cases)
    assert all(precision != "fp16" for _, precision, _ in contexts)


def test_a_stack_value_on_an_unknown_gpu_family_is_rejected(tmp_path):
    shutil.copytree(ROOT / "catalogs", tmp_path / "catalogs")
    path = tmp_path / "catalogs" / "efficiency.yaml"
    path.write_text(path.read_text().replace("trtllm@hopper:", "trtllm@hoper:", 1))
    with pytest.raises(CatalogError, match="'hoper' is not a GPU family.*hopper"):
        load_catalog(tmp_path / "catalogs")


def test_an_unknown_stack_in_a_problem_is_named(tiny_problem, tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text(tiny_problem.read_text().replace("workload:\n", "workload:\n  stack: megatron-cor\n", 1))
    r = CliRunner().invoke(main, ["solve", str(bad)])
    assert r.exit_code == 2 and "workload.stack" in r.output and "megatron-core" in r.output


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


def test_a_confident_serving_plan_bands_the_prediction_once(catalog):
    """At 90 % confidence every replica's rate is planned at its band's 10th percentile; the 90 %
    band printed beside it brackets the model's prediction, not that planned capacity (which would
    apply the band twice)."""
    runner = CliRunner()
    path = str(ROOT / "problems" / "llama2_70b_serving_h100.yaml")
    sure = json.loads(runner.invoke(main, ["solve", path, "--format", "json", "--confidence", "90"]).output)
    factor = sure["uncertainty"]["planning_factor"]
    assert factor < 1
    for cls in sure["plan"]["classes"]:
        predicted = sum(r["output_tokens_per_s_each"] * r["replicas"] for r in sure["plan"]["replicas"]
                        if r["class"] == cls["name"])
        assert cls["predicted_output_tokens_per_s"] == pytest.approx(predicted)
        assert cls["capacity_output_tokens_per_s"] == pytest.approx(predicted * factor, rel=1e-6)
        lo, hi = cls["capacity_band_90"]
        band = catalog.band("serve", False, AT_BATCH, "NVIDIA")  # a TPOT limit: at a batch, on calibrated values
        assert factor == pytest.approx(band.ratio(10), rel=1e-3)
        assert lo == pytest.approx(predicted * band.ratio(5), rel=1e-3) and lo < predicted
        assert hi == pytest.approx(predicted * band.ratio(95), rel=1e-3) and hi > predicted
    text = runner.invoke(main, ["solve", path, "--confidence", "90"]).output
    assert "planned at 90 % confidence (predicted" in text


def test_confidence_must_be_a_calibrated_level(tiny_problem, tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text(tiny_problem.read_text() + "confidence: 85\n")
    r = CliRunner().invoke(main, ["solve", str(bad)])
    assert r.exit_code == 2 and "field 'confidence'" in r.output


def test_gpu_hours_sanity_table(catalog, tmp_path):
    """Predicted GPU-hours beside the published ones; Llama 2 (A100) within a factor 1.5."""
    from optimizer.tradeoffs.gpu_hours import gpu_hours

    rows = (DATA / "gpu_hours.csv").read_text().splitlines()
    small = tmp_path / "llama2.csv"
    small.write_text("\n".join([rows[0]] + [r for r in rows[1:] if r.startswith("llama2")]) + "\n")
    table = gpu_hours(small, catalog)
    assert [r.model for r in table] == ["llama2-7b", "llama2-13b", "llama2-70b"]
    for r in table:
        assert 0.67 < r.ratio < 1.5, (r.model, r.ratio)
        assert r.band[0] < r.predicted < r.band[1] and r.gpus <= 2048
        assert not math.isnan(r.predicted)
    out = CliRunner().invoke(main, ["gpu-hours", "--data", str(small)]).output
    assert "1,720,320" in out and "llama2-70b" in out


def test_a_gpu_that_borrows_its_values_is_planned_and_reported_with_the_wider_band(catalog):
    """Gaudi 3 training takes the values fitted to Intel's Gaudi 2 runs: at 90 % confidence its
    rates are discounted by the extrapolated band's 10th percentile, an H100's by the calibrated
    one's; the flagship (which buys Gaudi 3) reports the extrapolated band and says so."""
    problem = replace(load_problem(ROOT / "problems" / "lab_budget.yaml", catalog), confidence=90)
    assert catalog.borrows("train", None, ("gaudi3", "bf16"))
    assert not catalog.borrows("train", None, ("h100-sxm", "bf16"))
    # Llama-2 7B is dense: the band of dense models' rows (bands.regime_of), on its GPU's vendor's
    assert confidence_factor(problem, catalog, "gaudi3") == catalog.band("train", True, DENSE, "Intel").ratio(10)
    assert confidence_factor(problem, catalog, "h100-sxm") == catalog.band("train", False, DENSE, "NVIDIA").ratio(10)
    out = json.loads(CliRunner().invoke(main, ["solve", str(ROOT / "problems" / "lab_budget.yaml"),
                                               "--format", "json"]).output)
    assert out["plan"]["gpu"] == "gaudi3" and out["uncertainty"]["extrapolated"] is True
    assert out["uncertainty"]["rows"] == catalog.band("train", True, DENSE, "Intel").rows


def test_an_unknown_training_precision_in_the_aliases_is_bad_input(tmp_path):
    """aliases.yaml maps training precision labels onto bf16, fp16, fp8 or fp4 only: anything else
    is reported with the file and the entry (exit 2), not raised from deep in the reader."""
    import shutil

    from tests.conftest import ROOT

    data = tmp_path / "calibration"
    shutil.copytree(ROOT / "calibration", data)
    aliases = yaml.safe_load((data / "aliases.yaml").read_text())
    label = next(iter(aliases["training_precisions"]))
    aliases["training_precisions"][label] = "fp32"
    (data / "aliases.yaml").write_text(yaml.safe_dump(aliases))
    result = CliRunner().invoke(main, ["validate", "--kind", "training", "--data", str(data)])
    assert result.exit_code == 2, result.output
    assert "aliases.yaml" in result.output and f"training_precisions.{label}" in result.output
    assert "'bf16', 'fp16', 'fp8' or 'fp4' (got 'fp32')" in result.output


def test_the_mfu_ceiling_is_the_best_published_dense_run(catalog):
    """The ceiling (issue 15, item 4) is data, not a guess: per family and precision with enough
    dense rows the highest MFU one of them reached, else the highest of all; each names its run."""
    from optimizer.calibration.ceiling import MIN_ROWS, measured_mfu, mfu_ceilings

    cases = [c for c in crossval.load_dataset("training", catalog).cases if not c.model.moe]
    table = catalog.efficiency.table.mfu_ceiling
    assert table is not None and table.model_dump() == mfu_ceilings(cases)
    assert table.default.value == round(max(measured_mfu(c) for c in cases), 4)
    for key, ceiling in table.hardware.items():
        mine = [c for c in cases if f"{c.family}/{efficiency_precision(c.precision)}" == key]  # FP16 counts as BF16
        assert len(mine) == ceiling.rows >= MIN_ROWS and ceiling.row in {c.row for c in mine}
    # a run compared on tokens/s gives the MFU the model's own convention reports for it
    c = next(c for c in cases if c.metric == "tokens_per_s_per_gpu")
    assert measured_mfu(c) == pytest.approx(c.measured * float(c.terms.model_flops_per_token) / float(c.terms.peak))


def test_an_unmeasured_gpu_family_gets_no_looser_mfu_ceiling_than_a_measured_one(catalog):
    """A family without dense runs of its own takes the ceiling of the family whose efficiencies it
    borrows (Blackwell BF16: Hopper's), else the lowest of the measured families' at that precision
    (MI300X, Gaudi 3 BF16), never the 65.3 % of all runs; the re-check's wording says which."""
    table = catalog.efficiency.table.mfu_ceiling
    assert table is not None and "hopper/bf16" in table.hardware and "blackwell/bf16" not in table.hardware
    assert catalog.mfu_ceiling("b200", "bf16") == table.hardware["hopper/bf16"]
    assert "on hopper, whose efficiencies blackwell borrows" in catalog.mfu_ceiling_scope("b200", "bf16")
    lowest = min(c.value for k, c in table.hardware.items() if k.endswith("/bf16"))
    for gpu in ("mi300x", "mi355x", "gaudi3"):
        assert catalog.mfu_ceiling(gpu, "bf16").value == lowest < table.default.value
        assert catalog.mfu_ceiling_scope(gpu, "bf16").startswith("on hopper, the lowest of the GPU families")
    assert catalog.mfu_ceiling("h100-sxm", "bf16") == table.hardware["hopper/bf16"]
    # BF16 and FP16 run at one tensor rate: an FP16 plan on H100 takes Hopper's BF16 runs, not Ampere's FP16
    assert "hopper/fp16" not in table.hardware
    assert catalog.mfu_ceiling("h100-sxm", "fp16") == table.hardware["hopper/bf16"]
    assert catalog.mfu_ceiling_scope("h100-sxm", "fp16") == "on its GPU family (hopper) at bf16"


def test_mfu_counts_only_the_attention_a_sliding_window_computes(catalog):
    """Gemma 3's local layers attend to 1,024 tokens: its model FLOPs count that, not the whole
    sequence, so its MFU is comparable with the ceiling (it read 76.8 % on H100 before)."""
    from optimizer.perf.model import attention_flops_per_token_layer, model_flops_per_token

    m = catalog.models["gemma3-12b"].spec()
    assert m.sliding_layers and m.sliding_window and m.sliding_window < m.seq_len
    full = replace(m, sliding_layers=0)
    saved = 3 * m.layers * (attention_flops_per_token_layer(m, m.seq_len)
                            - attention_flops_per_token_layer(m, m.attended(m.seq_len)))
    assert model_flops_per_token(full) - model_flops_per_token(m) == pytest.approx(saved)
    r = CliRunner().invoke(main, ["estimate", "train", "--model", "gemma3-12b", "--gpu", "h100-sxm", "--gpus", "64",
                                  "--tp", "8", "--pp", "1", "--cp", "2", "--tokens", "1T", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["mfu"] < catalog.mfu_ceiling("h100-sxm", "bf16").value


def test_an_unpooled_parameter_keeps_each_engine_apart(datasets, catalog):
    """``stage_overhead`` is fitted per engine and not pooled: each engine's value shrinks toward
    the prior on its own, so one engine's pipelines neither pull the default nor reach another
    engine's rows; a pooled parameter's engine values shrink toward the default."""
    from optimizer.calibration.fit import Layout

    ds = datasets["serving"]
    sens = crossval.sensitivity(ds, catalog)
    layout = Layout("serving", catalog.efficiency, ds.contexts, sens, list(range(len(ds.cases))))
    slots = {(s.param, s.key): (i, s) for i, s in enumerate(layout.slots)}
    default, _ = slots[("stage_overhead", "default")]
    engines = [s for (param, key), (_, s) in slots.items() if param == "stage_overhead" and key.startswith("stack:")]
    assert {s.key for s in engines} >= {"stack:trtllm", "stack:llamacpp"}
    prior = catalog.efficiency.table.serving["stage_overhead"].prior
    assert all(s.parent == -1 and s.center == prior for s in engines)
    pooled = [s for (param, key), (_, s) in slots.items() if param == "step_overhead" and key.startswith("stack:")]
    step_default, _ = slots[("step_overhead", "default")]
    assert pooled and all(s.parent >= 0 for s in pooled)
    assert any(s.parent == step_default for s in pooled)
    assert catalog.efficiency.table.serving["stage_overhead"].pooled is False
    assert catalog.efficiency.table.serving["step_overhead"].pooled is True
    assert default >= 0


def test_offline_sources_are_modelled_without_an_api_server(datasets):
    """A source whose engine was driven directly (a benchmark script, vLLM's LLM.generate) is
    compared with the model's offline batch; one measured through a server with its online one."""
    cases = datasets["serving"].cases
    online = {c.source: c.plan.online for c in cases}
    assert not online["llm-inference-bench"] and not online["trtllm-1.0-perf-overview"]
    assert online["gpustack-performance-lab"] and online["vllm-lambda-0.5"] and online["tgi-sagemaker"]


def test_llm_inference_bench_rows_are_the_files_own_arithmetic():
    """serving_runs_5.csv (LLM-Inference-Bench): each row's throughput is batch × (input + output)
    / latency, the source's formula, with the latency quoted in its notes; ids name the file's row."""
    rows = list(csv.DictReader((DATA / "serving_runs_5.csv").open(encoding="utf-8")))
    assert len(rows) == 509 and len({r["id"] for r in rows}) == 509
    for r in rows:
        line = re.search(r"All_results\.csv line (\d+): '([^']*)'", r["notes"])
        assert line and int(r["id"].rsplit("-", 1)[1]) + 1 == int(line.group(1))
        hw, n, fw, model, io, bs, latency, throughput = line.group(2).split(",")
        assert (n, model, io, bs) == (r["tp"], r["model"], r["input_len"], r["batch_or_concurrency"])
        assert r["input_len"] == r["output_len"] and r["throughput_total_tok_s"] == throughput
        assert float(throughput) == pytest.approx(int(bs) * 2 * int(io) / float(latency), rel=1e-9)


def test_serving_runs_7_rows_are_their_quoted_source_lines():
    """serving_runs_7.csv: each DataCrunch SGLang row is its jsonl line (quoted whole in the notes),
    with the mean lengths its token totals imply; each CloudRift row is its vllm bench serve result
    block, whose throughputs are the quoted token totals over the quoted duration."""
    rows = list(csv.DictReader((DATA / "serving_runs_7.csv").open(encoding="utf-8")))
    assert len(rows) == 13 and len({r["id"] for r in rows}) == 13
    for r in rows:
        if r["id"].startswith("datacrunch-sgl-"):
            line = re.search(r"jsonl line (\d+): '(\{[^']*\})'", r["notes"])
            assert line and int(r["id"].rsplit("-", 1)[1]) == int(line.group(1))
            d = json.loads(line.group(2).replace("Infinity", "1e999"))
            assert d["backend"] == "sglang" and math.isinf(d["request_rate"]) and d["max_concurrency"] is None
            assert r["throughput_output_tok_s"] == repr(d["output_throughput"])
            assert d["output_throughput"] == pytest.approx(d["total_output_tokens"] / d["duration"], rel=1e-9)
            assert r["batch_or_concurrency"] == f"{d['completed']} requests sent at once (request rate inf)"
            means = re.search(r"mean input/output tokens per request (\d+)/(\d+)", r["notes"])
            assert means and (int(means.group(1)), int(means.group(2))) == (
                round(d["total_input_tokens"] / d["completed"]), round(d["total_output_tokens"] / d["completed"]))
            assert not (r["ttft_ms"] or r["tpot_ms"] or r["throughput_total_tok_s"])  # medians only
        else:
            assert r["id"].startswith(("cloudrift-5090-", "cloudrift-pro6000-"))
            q = {k: v for k, v in re.findall(r"'([^':]+): ([\d.]+)'", r["notes"])}
            duration, prompts = float(q["Benchmark duration (s)"]), int(q["Successful requests"])
            tin, tout = int(q["Total input tokens"]), int(q["Total generated tokens"])
            assert (r["throughput_output_tok_s"], r["throughput_total_tok_s"]) == (
                q["Output token throughput (tok/s)"], q["Total Token throughput (tok/s)"])
            assert (r["ttft_ms"], r["tpot_ms"]) == (q["Mean TTFT (ms)"], q["Mean TPOT (ms)"])
            assert tout == prompts * int(r["output_len"])  # --ignore-eos: every request generates 1,000 tokens
            assert float(r["throughput_output_tok_s"]) == pytest.approx(tout / duration, rel=3e-5)
            assert float(r["throughput_total_tok_s"]) == pytest.approx((tin + tout) / duration, rel=3e-5)
            concurrency = q["Maximum request concurrency"]
            assert r["batch_or_concurrency"].startswith(f"max concurrency {concurrency} ({prompts} ")


def test_serving_runs_9_rows_are_their_quoted_table_lines():
    """serving_runs_9.csv (ROCm/vllm dev-docker README at vLLM 0.7.3): each row quotes its line of the
    README's throughput or latency table, and its cells are that line's figures; a latency row's
    end-to-end seconds are in ``e2e_latency_s``, the 405B block's mislabelled checkpoint kept as printed."""
    rows = [r for r in csv.DictReader((DATA / "serving_runs_9.csv").open(encoding="utf-8"))
            if r["id"].startswith("rocm-vllm073-")]
    assert len(rows) == 40 and len({r["id"] for r in rows}) == 40
    above: list[str] = []
    for r in rows:  # in the README's order; a blank model, format and TP cell repeats the line above's
        line = re.match(r"(Throughput|Latency) Measurements table line: '\|([^']*)\|'", r["notes"])
        assert line, r["id"]
        cells = [c.strip() for c in line.group(2).split("|")]
        cells[:3] = cells[:3] if cells[0] else above
        above = cells[:3]
        assert (cells[0], cells[1], cells[2]) == (r["model"], "FP8", r["tp"]), r["id"]
        if line.group(1) == "Throughput":
            n = int(r["id"].rsplit("-", 1)[1])
            assert n <= 8 and (cells[3], cells[4]) == (r["input_len"], r["output_len"])
            # output tokens/s: the README's own latency table rules out total (its notes say how)
            assert r["throughput_output_tok_s"] == cells[7] and not r["e2e_latency_s"]
            assert not r["throughput_total_tok_s"] and "METRIC: output tokens/s." in r["notes"]
            assert r["batch_or_concurrency"].startswith(f"max load (offline benchmark_throughput: {cells[5]} prompts")
        else:
            assert (cells[3], cells[4], cells[5]) == (r["batch_or_concurrency"], r["input_len"], r["output_len"])
            assert r["e2e_latency_s"] == cells[6] and not (r["throughput_total_tok_s"] or r["throughput_output_tok_s"])


def test_a_static_batch_timed_end_to_end_is_compared_as_its_output_throughput(datasets):
    """benchmark_latency.py times one generate call of b prompts: b × output_len tokens in
    ``e2e_latency_s`` seconds, compared with the model's output throughput of that static batch."""
    rows = {r["id"]: r for name in ("serving_runs_3.csv", "serving_runs_9.csv")
            for r in csv.DictReader((DATA / name).open(encoding="utf-8"))}
    cases = {c.row: c for c in datasets["serving"].cases}
    timed = [i for i, r in rows.items() if r.get("e2e_latency_s")]
    assert len(timed) == 64
    for row_id in timed:
        case, r = cases[row_id], rows[row_id]
        batch = int(r["batch_or_concurrency"])
        assert case.plan.batching == "static" and not case.plan.online and case.plan.batch == batch
        expected = batch * int(r["output_len"]) / float(r["e2e_latency_s"])
        assert case.measured == (("output_tokens_per_s", pytest.approx(expected, rel=1e-12)),)
    # the seconds of a run that is not one static batch of a stated size say nothing of its rate
    from optimizer.calibration.serving import serving_case

    catalog = load_catalog()
    row = {**rows["rocm-vllm073-009"], "batch_or_concurrency": "max load (offline)"}
    reason = serving_case(row, catalog, load_aliases(), load_sources())
    assert reason == "no measured throughput or latency in the row (e2e_latency_s is read for a static batch only)"


def test_a_static_batch_larger_than_the_kv_cache_is_compared_as_waves_of_what_fits(datasets):
    """dstack's 405B FP8 runs on 8 x H100 (vLLM 0.6.3's benchmark_throughput.py with --max-model-len
    91680 and chunked prefill off, so a 91,680-token activation profile): throughput flattens once the
    batch no longer fits at full length. Such a row is compared with one wave of what fits."""
    from optimizer.perf.serve import serve_time
    from optimizer.perf.serve_memory import full_length_batch

    cases = {c.row: c for c in datasets["serving"].cases}
    flat = [cases[f"dstack-h100mi300x-h100x8-meta-offline-{i}"] for i in (41, 42, 43)]  # 2048/2048 at 64-256
    assert [c.plan.batch for c in flat] == [64, 128, 256]
    assert all(c.plan.token_budget == 91680 and c.plan.batching == "static" for c in flat)
    wave = full_length_batch(flat[0].model, flat[0].hw, flat[0].plan)
    assert 16 < wave < 64 and all(float(c.terms.batch) == wave and f"in waves of {wave}" in c.config for c in flat)
    rates = {float(serve_time(c.terms, ServeParams()).output_tokens_per_s) for c in flat}
    assert len(rates) == 1  # one wave's rate, whatever the batch
    small = cases["dstack-h100mi300x-h100x8-meta-offline-02"]  # batch 4 fits whole
    assert float(small.terms.batch) == small.plan.batch == 4 and "waves" not in small.config


def test_a_row_faster_than_its_hardware_allows_is_not_compared(datasets):
    """At a stated batch, a throughput above the roofline (weights and the experts the batch routes
    to read at spec bandwidth every decode step, GEMMs at peak, no overhead, free links) cannot be
    the workload the row states. LLM-Inference-Bench's TensorRT-LLM Mixtral runs (examples/run.py
    stops at the tokenizer's end-of-sequence token) are the ones that are."""
    from optimizer.calibration.serving import above_roofline, serving_case

    rows = {r["id"]: r for r in csv.DictReader((DATA / "serving_runs_5.csv").open(encoding="utf-8"))}
    above = sorted(r for r, _, why in datasets["serving"].skipped if "roofline" in why)
    assert above == ["argonne-a100-trt-0597", "argonne-a100-trt-0601", "argonne-a100-trt-0602",
                     "argonne-a100-trt-0606", "argonne-a100-trt-0607", "argonne-h100-trt-1315"]
    assert {rows[r]["model"] for r in above} == {"mistralai/Mixtral-8x7B-v0.1"}
    assert all(int(rows[r]["batch_or_concurrency"]) >= 16 for r in above)  # every expert read: a strict bound
    # the bound itself: a case just under it is compared, the same case just over it is not
    case = next(c for c in datasets["serving"].cases if c.row == "argonne-h100-trt-1316")  # batch 32
    (metric, value), = case.measured
    assert metric == "total_tokens_per_s" and above_roofline(case.terms, case.scale, case.measured) is None
    bound = float(re.search(r"roofline's ([\d,]+)", above_roofline(case.terms, case.scale, ((metric, 1e9),)))
                  .group(1).replace(",", ""))
    assert value < bound < value * 1.05  # this row sits just under its hardware's limit
    assert above_roofline(case.terms, case.scale, ((metric, bound * 1.02),))
    assert above_roofline(case.terms, case.scale, (("tpot_ms", 1e-3),))
    # maximum load is not checked: its batch is the model's own reading of memory
    row = {**rows["argonne-a100-trt-0597"], "batch_or_concurrency": "max load (offline)"}
    assert not isinstance(serving_case(row, load_catalog(), load_aliases(), load_sources()), str)


def test_serving_runs_6_rows_are_their_quoted_source_lines():
    """serving_runs_6.csv (dstackai/benchmarks): every row quotes its line of the source CSV; its
    cells are that line's figures, and its throughputs are the line's token totals over its duration
    (printed to 0.01 s in the benchmark_serving.py result files), or batch × (input + output) / latency
    for benchmark_throughput.py. Mean lengths are the totals over the requests, halves rounded up."""
    rows = list(csv.DictReader((DATA / "serving_runs_6.csv").open(encoding="utf-8")))
    assert len(rows) == 143 and len({r["id"] for r in rows}) == 143
    # the two columns of these lines come from different runs (notes): tokens/s is what is stored
    loose = {f"dstack-h100mi300x-h100x8-meta-offline-{n}": 5e-3 for n in range(37, 44)}
    loose |= {f"dstack-h100mi300x-mi300x8-meta-offline-{n}": 0.07 for n in range(44, 51)}
    loose |= {"dstack-h100mi300x-mi300x8-meta-qps16": 5e-3, "dstack-h100mi300x-mi300x8-meta-qps32": 8e-3,
              "dstack-h100mi300x-mi300x8-meta-qps1000": 5e-5}  # its duration is printed as 193.98
    for r in rows:
        quoted = re.match(r"(\S+\.csv) line (\d+): '([^']*)'\.", r["notes"])
        assert quoted, r["id"]
        name, line, cells = quoted.group(1), int(quoted.group(2)), quoted.group(3).split(",")
        means = re.search(r"mean input/output tokens per request (\d+)/(\d+)", r["notes"])
        if name.startswith("result_"):  # benchmark_serving.py result tables (amd/)
            assert r["id"].startswith("dstack-mi300x-") and int(r["id"].rsplit("-", 1)[1]) + 1 == line
            n, dur, tin, tout = int(cells[0]), float(cells[1]), int(cells[2]), int(cells[3])
            assert (r["throughput_output_tok_s"], r["throughput_total_tok_s"], r["ttft_ms"], r["tpot_ms"]) == (
                cells[5], cells[6], cells[7], cells[10])
            for tokens, printed in ((tout, cells[5]), (tin + tout, cells[6])):
                assert tokens / (dur + 0.005) - 0.005 <= float(printed) <= tokens / (dur - 0.005) + 0.005, r["id"]
            if n == 1:
                assert (r["input_len"], r["output_len"]) == (str(tin), str(tout)) and not means
            else:
                assert means and (int(means.group(1)), int(means.group(2))) == (int(tin / n + 0.5), int(tout / n + 0.5))
                assert r["batch_or_concurrency"].startswith((f"{n} requests sent at once", "request rate "))
                assert r["batch_or_concurrency"].endswith((f", {n} requests", "(request rate inf)", "(198 succeeded)"))
        elif name == "throughput_latency_curve.csv":  # benchmark_throughput.py, offline
            assert r["id"].endswith(f"-offline-{line:02d}") and cells[0] != "8xMi300x 2FP8-amd"
            inp, out, n, latency, tps = int(cells[1]), int(cells[2]), int(cells[3]), float(cells[4]), cells[5]
            assert (r["input_len"], r["output_len"], r["batch_or_concurrency"]) == (str(inp), str(out), str(n))
            assert r["throughput_total_tok_s"] == tps and not (r["throughput_output_tok_s"] or r["ttft_ms"])
            assert float(tps) == pytest.approx(n * (inp + out) / latency, rel=loose.get(r["id"], 1e-4)), r["id"]
            assert r["tp"] == r["gpu_count"] == cells[0].strip()[0]
        else:  # benchmark_serving.py on ShareGPT (qps_comparison.csv)
            assert name == "qps_comparison.csv"
            d = dict(zip(QPS_HEADER.split(","), cells, strict=True))
            assert r["id"].endswith(f"-qps{d['request_rate']}")
            dur, done = float(d["duration"]), int(d["completed"])
            tin, tout = int(d["total_input_tokens"]), int(d["total_output_tokens"])
            assert (r["throughput_output_tok_s"], r["throughput_total_tok_s"], r["ttft_ms"], r["tpot_ms"]) == (
                d["output_throughput"], d["total_token_throughput"], d["mean_ttft_ms"], d["mean_tpot_ms"])
            rel = loose.get(r["id"], 1e-6)
            assert float(d["output_throughput"]) == pytest.approx(tout / dur, rel=rel), r["id"]
            assert float(d["total_token_throughput"]) == pytest.approx((tin + tout) / dur, rel=rel), r["id"]
            assert means and (int(means.group(1)), int(means.group(2))) == (
                int(tin / done + 0.5), int(tout / done + 0.5))
            load = f"request rate {d['request_rate']} req/s, {d['num_prompts']} requests"
            assert r["batch_or_concurrency"].startswith(load)


QPS_HEADER = ("gpu,num_prompts,request_rate,max_concurrency,duration,completed,total_input_tokens,total_output_tokens,"
              "request_throughput,request_goodput,output_throughput,total_token_throughput,mean_ttft_ms,median_ttft_ms,"
              "std_ttft_ms,p99_ttft_ms,mean_tpot_ms,median_tpot_ms,std_tpot_ms,p99_tpot_ms,mean_itl_ms,median_itl_ms,"
              "std_itl_ms,p99_itl_ms,num-scheduler-step,qps,enable-chunked-prefill,max-num-batched-tokens,max-num-seqs,"
              "max-seq-len-to-capture,enable-prefix-caching,filename")



def test_vllm_0_6_1_on_rocm_is_its_own_stack_before_the_custom_paged_attention_kernel(catalog, datasets):
    """vLLM 0.6.1 on ROCm ran the generic paged-attention kernels ported from CUDA; AMD's custom
    decode kernel (vllm pull 8310) came after it, in the 0.6.2-0.6.4 builds dstack measured. The two
    are separate stacks, so LLM-Inference-Bench's 0.6.1 rows do not set the 0.6.3 predictions; the
    older one falls back to the newer where it has no value of its own."""
    from optimizer.calibration.serving import engine_of

    aliases = load_aliases()
    assert engine_of("vLLM 0.6.1 on ROCm (argonne)", aliases) == "vllm-rocm-0.6.1"
    assert engine_of("vLLM 0.6.3.dev116+g151ef4ef on ROCm 6.1", aliases) == "vllm-rocm-0.6"
    assert engine_of("vLLM 0.6.10 on ROCm", aliases) != "vllm-rocm-0.6.1"
    stacks = {(c.source, c.stack) for c in datasets["serving"].cases if c.stack.startswith("vllm-rocm-0.6")}
    assert stacks == {("llm-inference-bench", "vllm-rocm-0.6.1"), ("dstack-mi300x-405b", "vllm-rocm-0.6"),
                      ("dstack-h100-mi300x-fp8", "vllm-rocm-0.6")}
    assert catalog.efficiency.stack_keys("serving", "vllm-rocm-0.6.1", "cdna3", False)[:3] == [
        "vllm-rocm-0.6.1", "vllm-rocm-0.6", "vllm-rocm"]


def test_vllm_releases_map_to_the_engine_they_ran():
    """vLLM 0.8.0 made the V1 engine the default (vllm-project/vllm pull 15064): 0.9.2 is `vllm`,
    0.6-0.7 the V0 releases `vllm-0.7`, 0.5 and earlier `vllm-0.5`; a ROCm build its own engine."""
    from optimizer.calibration.serving import engine_of
    aliases = load_aliases()
    assert engine_of("vLLM v0.9.2 (vllm bench serve, ShareGPT)", aliases) == "vllm"
    assert engine_of("vLLM 0.6.3.post2.dev308+gb489fc3c", aliases) == "vllm-0.7"
    assert engine_of("vLLM 0.7.3", aliases) == "vllm-0.7"
    assert engine_of("vLLM 0.5.4", aliases) == "vllm-0.5"
    assert engine_of("vLLM 0.6.3.dev116+g151ef4ef on ROCm 6.1", aliases) == "vllm-rocm-0.6"
