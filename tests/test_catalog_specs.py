"""Every GPU figure is sourced and dated; GPUs kept for calibration are not offered by default."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from optimizer.catalog import GPU_FAMILIES, SPEC_FIELDS, GpuFile, load_catalog
from optimizer.errors import CatalogError
from optimizer.problem import load_problem
from tests.conftest import ROOT

DATE = re.compile(r"\d{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?")


@pytest.fixture(scope="module")
def gpu_file() -> GpuFile:
    return GpuFile.model_validate(yaml.safe_load((ROOT / "catalogs" / "gpus.yaml").read_text()))


def test_every_gpu_has_a_family_and_every_figure_a_dated_source(gpu_file):
    assert gpu_file.spec_sources
    for key, src in gpu_file.spec_sources.items():
        assert src.title.strip() and src.where.strip(), key
        assert DATE.fullmatch(src.date), (key, src.date)
    for gpu in gpu_file.gpus:
        assert gpu.family in GPU_FAMILIES, gpu.id
        present = {name for name in SPEC_FIELDS if getattr(gpu, name) is not None}
        assert set(gpu.specs) == present, gpu.id
        for name, key in gpu.specs.items():
            assert key in gpu_file.spec_sources, (gpu.id, name, key)


def test_new_parts_are_in_the_catalog_with_dense_figures(catalog):
    for gid in ("b300", "gb200", "gb300", "rtx-5090", "rtx-pro-6000", "rtx-pro-6000-maxq", "rtx-pro-6000-server",
                "rtx-3090-ti", "rtx-4060-ti-16gb", "gb10", "mi325x", "mi355x", "gaudi3"):
        assert gid in catalog.gpus, gid
        assert catalog.servers_for(gid), f"{gid} has no server"
    assert catalog.gpus["b200"].fp4_tflops == 9000  # 18 PF with sparsity, halved
    assert catalog.gpus["gb200"].link_domain == 72
    assert catalog.gpus["mi300x"].fp8_tflops == pytest.approx(2614.9)
    nvl72 = catalog.servers["nvl72-gb300"]
    assert nvl72.slots == 72 and nvl72.full_only


def _catalog_copy(tmp_path: Path, old: str, new: str) -> Path:
    root = tmp_path / "cat"
    shutil.copytree(ROOT / "catalogs", root)
    text = (root / "gpus.yaml").read_text()
    assert old in text
    (root / "gpus.yaml").write_text(text.replace(old, new, 1))
    return root


def test_a_figure_without_a_source_is_rejected_naming_the_gpu_and_field(tmp_path):
    h100 = ("specs: {memory_gb: stas00, mem_bw_gbs: stas00, bf16_tflops: stas00, fp16_tflops: stas00, "
            "fp8_tflops: stas00, link_bw_gbs: stas00, tdp_w: stas00, mamf_bf16_tflops: stas00_mamf, "
            "mamf_fp8_tflops: stas00_mamf}")
    root = _catalog_copy(tmp_path, h100, h100.replace("fp8_tflops: stas00, ", ""))
    with pytest.raises(CatalogError) as err:
        load_catalog(root)
    text = str(err.value)
    assert "gpus.yaml" in text and "(id 'h100-sxm')" in text and "field 'specs.fp8_tflops'" in text
    assert "has no source" in text and "To fix:" in text


def test_a_source_key_that_is_not_defined_is_rejected_with_a_suggestion(tmp_path):
    h100 = "specs: {memory_gb: stas00, mem_bw_gbs: stas00,"
    root = _catalog_copy(tmp_path, h100, "specs: {memory_gb: stas00, mem_bw_gbs: stas0,")
    with pytest.raises(CatalogError) as err:
        load_catalog(root)
    text = str(err.value)
    assert "(id 'h100-sxm')" in text and "field 'specs.mem_bw_gbs'" in text and "Did you mean 'stas00'?" in text


def test_an_undated_source_is_rejected(tmp_path):
    root = _catalog_copy(tmp_path, '    date: "2026-08"\n', '    date: "August 2026"\n')
    with pytest.raises(CatalogError) as err:
        load_catalog(root)
    assert "field 'spec_sources.stas00.date'" in str(err.value)


def test_a_gpu_without_a_family_is_rejected(tmp_path):
    root = _catalog_copy(tmp_path, "    family: hopper\n", "")
    with pytest.raises(CatalogError) as err:
        load_catalog(root)
    assert "(id 'h100-sxm')" in str(err.value) and "field 'family'" in str(err.value)


PROBLEM = """\
schema_version: 1
name: purchasable
workload: {model: llama2-7b, tokens: 20B, global_batch: {max_seqs: 256}}
objective: min_cost
deadline_days: 30
site: {datacenter: true, power_cap_kw: 200}
"""


def test_calibration_only_gpus_are_left_out_of_the_default_list_but_can_be_allowed(catalog, tmp_path):
    hidden = {g for g, gpu in catalog.gpus.items() if not gpu.purchasable}
    assert {"rtx-3090-ti", "rtx-4060-ti-16gb", "gb10"} <= hidden
    default = tmp_path / "default.yaml"
    default.write_text(PROBLEM)
    gpus = set(load_problem(default, catalog).gpus)
    assert gpus and not gpus & hidden
    assert gpus == {g for g, gpu in catalog.gpus.items() if gpu.purchasable}
    allowed = tmp_path / "allowed.yaml"
    allowed.write_text(PROBLEM + "hardware: {allow_gpus: [gb10, rtx-3090-ti, h100-sxm]}\n")
    assert set(load_problem(allowed, catalog).gpus) == {"gb10", "rtx-3090-ti", "h100-sxm"}


def test_geforce_fp16_accumulate_doubles_the_prompt_gemms_of_an_engine_that_uses_it(catalog):
    """GeForce cards run 16-bit tensor math at half rate with FP32 accumulation and full rate with
    FP16 accumulation (Ada whitepaper App. A: RTX 4090 165.2 vs 330.3); llama.cpp's cuBLAS GEMMs
    accumulate in FP16, so its prefill on a 4090 is bound by the higher peak, and vLLM's is not."""
    from optimizer.perf.serve import ServePlan, gemm_peak, serve

    assert catalog.gpus["rtx-4090"].fp16_acc16_tflops == 330.3 and catalog.gpus["h100-sxm"].fp16_acc16_tflops is None
    dev = catalog.device("rtx-4090")
    fast = ServePlan(precision="fp16", **catalog.serve_plan_traits("rtx-4090", "llamacpp"))
    slow = ServePlan(precision="fp16", **catalog.serve_plan_traits("rtx-4090", "vllm"))
    assert fast.fp16_accumulate and not slow.fp16_accumulate
    assert gemm_peak(dev, fast) == pytest.approx(2 * gemm_peak(dev, slow), rel=1e-3)  # 330.3 vs 165.2
    h100 = ServePlan(precision="fp16", **catalog.serve_plan_traits("h100-sxm", "llamacpp"))
    h100_dev = catalog.device("h100-sxm")
    assert gemm_peak(h100_dev, h100) == h100_dev.peak("fp16") * h100_dev.achievable_share("fp16")
    m = catalog.models["llama3-8b"].spec()
    hw = catalog.hardware("rtx-4090", "desktop-4", None)
    params = catalog.serve_params("rtx-4090", "fp16", "llamacpp")
    prompt = ServePlan(precision="fp16", input_len=1024, output_len=1, batch=1,
                       **catalog.serve_plan_traits("rtx-4090", "llamacpp"))
    plain = ServePlan(precision="fp16", input_len=1024, output_len=1, batch=1,
                      **{**catalog.serve_plan_traits("rtx-4090", "llamacpp"), "fp16_accumulate": False})
    assert serve(m, hw, prompt, params).ttft < serve(m, hw, plain, params).ttft


def test_a_model_spelled_out_in_a_problem_is_checked_and_built_as_a_preset(catalog):
    """Presets and inline models share one shape (ModelShape): any preset, spelled out field by field
    in a problem file, gives the same ModelSpec; the shape's checks apply to both."""
    from pydantic import ValidationError

    from optimizer.catalog.model_records import ModelShape
    from optimizer.problem.schema import InlineModel

    for preset in catalog.models.values():
        fields = preset.model_dump(include=set(ModelShape.model_fields))
        assert InlineModel(name=preset.id, **fields).spec() == preset.spec(), preset.id
    with pytest.raises(ValidationError, match="sliding_layers .at most layers. and sliding_window go together"):
        InlineModel(layers=2, hidden=64, heads=4, ffn_hidden=128, vocab=100, seq_len=32, mlp="gelu", sliding_layers=1)


def test_a_gemm_reaches_the_measured_share_of_the_peak(catalog):
    """stas00's MAMF table (TFLOP/s a matmul sweep reached) over each entry's own peak; a part without
    a measurement takes its family's mean share (each distinct measurement once), FP8 its BF16 share,
    and a family no one measured the median share of the measured parts."""
    from statistics import median

    source = {"a100-sxm-80gb": (271.2, None), "a100-pcie-80gb": (252.9, None), "gh200": (828.6, 1535.0),
              "h100-sxm": (794.5, 1402.6), "h200-sxm": (794.5, 1453.4), "b200": (1745.0, 3432.5),
              "b300": (1769.0, 3353.3), "gb200": (1822.0, 3615.6), "mi300x": (668.4, None),
              "mi325x": (784.9, None), "mi355x": (1565.0, None), "gaudi2": (418.7, 826.5), "gaudi3": (1243.0, 1289.5)}
    shares = {g: dict(v) for g, v in catalog.matmul_shares.items()}
    for gpu_id, (bf16, fp8) in source.items():
        gpu = catalog.gpus[gpu_id]
        assert (gpu.mamf_bf16_tflops, gpu.mamf_fp8_tflops) == (bf16, fp8), gpu_id
        assert shares[gpu_id]["bf16"] * gpu.bf16_tflops == pytest.approx(bf16), gpu_id  # never above what was measured
        if fp8:
            assert shares[gpu_id]["fp8"] * gpu.fp8_tflops == pytest.approx(fp8), gpu_id
    assert shares["mi355x"]["bf16"] == pytest.approx(1565.0 / 2516.6, abs=5e-4)  # its own peak, not the table's 2,300
    assert shares["mi300x"]["fp8"] == shares["mi300x"]["bf16"]  # not measured: its BF16 share
    hopper = {794.5 / 989, 828.6 / 990}  # H100 and H200 share one figure: it counts once
    assert shares["h100-pcie"]["bf16"] == pytest.approx(sum(hopper) / 2)
    measured = {g.mamf_bf16_tflops / g.bf16_tflops for g in catalog.gpus.values() if g.mamf_bf16_tflops}
    assert shares["rtx-4090"]["bf16"] == pytest.approx(median(sorted(measured)))  # no Ada part measured
    assert all(0.3 < v <= 1.0 for per in shares.values() for v in per.values())


def test_training_counts_mfu_against_the_spec_peak_and_gemms_against_the_ceiling(catalog):
    """A training step's MFU is defined against the spec peak; its GEMMs run at a share of the
    measured ceiling, as serving's do."""
    from optimizer.perf.specs import TrainPlan
    from optimizer.perf.train import train_terms

    hw = catalog.hardware("h100-sxm", "hgx-hopper-8", None)
    terms = train_terms(catalog.models["llama2-7b"].spec(), hw, TrainPlan(dp=8))
    assert terms.peak == hw.device.peak_of("bf16") == 989e12
    assert terms.gemm_share == pytest.approx(794.5 / 989)
    assert train_terms(catalog.models["llama2-7b"].spec(), hw, TrainPlan(dp=8, precision="fp8")).gemm_share \
        == pytest.approx(1402.6 / 1979)
    from optimizer.perf.train import train_step
    r = train_step(catalog.models["llama2-7b"].spec(), hw, TrainPlan(dp=8), catalog.train_params("h100-sxm", "bf16"))
    assert r.mfu == pytest.approx(r.flops_per_gpu / 989e12)  # MFU against the spec peak
