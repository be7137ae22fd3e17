"""What a quantised checkpoint's weights take and cost (``optimizer.perf.weights``): quantisers keep
the embedding table and the LM head in 16-bit, gpt-oss keeps everything but its routed experts in
BF16, a forward pass streams all but an untied input table, and a 16-bit GEMM runs at the 16-bit rate."""

from dataclasses import replace

import pytest

from optimizer.calibration.crossval import load_dataset
from optimizer.perf.model import expert_params, param_count, transformer_params
from optimizer.perf.params import ServeParams
from optimizer.perf.serve import ServePlan, serve_terms, serve_time
from optimizer.perf.serve_memory import dequant_bytes
from optimizer.perf.specs import BYTES
from optimizer.perf.weights import (
    active_matmul_params,
    expert_ramp,
    expert_slice_bytes,
    gemm_peak,
    math_precision,
    matmul_params_16bit,
    rate_weighted_matmul_params,
    routed_matmul_params,
    streamed_weight_bytes,
    weight_bytes,
)

LLAMA3_TABLE = 128256 * 4096  # Llama 3 8B's untied embedding table, and its LM head


def test_fp8_and_nvfp4_keep_the_embedding_and_head_in_16_bit(catalog):
    m = catalog.models["llama3-70b"].spec()
    table = 128256 * 8192
    blocks = transformer_params(m)
    assert blocks + 2 * table + 8192 == param_count(m)  # blocks, input table, LM head, final norm
    assert weight_bytes(m, "bf16") == 2 * param_count(m)
    assert weight_bytes(m, "fp8") == blocks + 2 * (2 * table + 8192)  # 68.45 B FP8, 2.1 B BF16: 72.7 GB
    assert weight_bytes(m, "nvfp4") == pytest.approx(blocks * 4.5 / 8 + 2 * (2 * table + 8192))
    # a forward pass streams the LM head, not the input table, whose rows it gathers
    for precision in ("bf16", "fp8", "nvfp4", "awq-int4"):
        assert weight_bytes(m, precision) - streamed_weight_bytes(m, precision) == 2 * table
    assert matmul_params_16bit(m, "fp8") == table and matmul_params_16bit(m, "bf16") == 0


def test_a_gguf_type_covers_its_whole_file_and_a_tied_table_is_streamed(catalog):
    m = catalog.models["llama3-70b"].spec()
    assert weight_bytes(m, "gguf-q4km") == param_count(m) * BYTES["gguf-q4km"]
    assert streamed_weight_bytes(m, "gguf-q4km") == (param_count(m) - 128256 * 8192) * BYTES["gguf-q4km"]
    assert matmul_params_16bit(m, "gguf-q4km") == 0
    tied = replace(m, tie_embeddings=True)  # one table, read whole as the LM head
    assert streamed_weight_bytes(tied, "fp8") == weight_bytes(tied, "fp8")
    assert weight_bytes(m, "fp8") - weight_bytes(tied, "fp8") == 2 * 128256 * 8192


def test_gpt_oss_keeps_all_but_its_experts_in_bf16(catalog):
    m = catalog.models["gpt-oss-120b"].spec()
    # the model card: a checkpoint of 60.8 GiB, MXFP4 experts and every other tensor in BF16
    assert weight_bytes(m, "mxfp4") == pytest.approx(60.8 * 2**30, rel=0.005)
    assert weight_bytes(catalog.models["gpt-oss-20b"].spec(), "mxfp4") == pytest.approx(12.8 * 2**30, rel=0.01)
    # a token multiplies its attention, router and LM head in BF16, its four experts in MXFP4
    assert matmul_params_16bit(m, "mxfp4") == active_matmul_params(m) - routed_matmul_params(m)
    assert expert_params(m) > 0
    # a dense model in MXFP4 has no experts: its blocks' linear layers are the quantised ones
    dense = catalog.models["llama3-70b"].spec()
    blocks = transformer_params(dense)
    assert weight_bytes(dense, "mxfp4") == pytest.approx(blocks * BYTES["mxfp4"] + 2 * (param_count(dense) - blocks))
    assert matmul_params_16bit(dense, "mxfp4") == 128256 * 8192


def test_a_16_bit_gemm_runs_at_the_16_bit_rate(catalog):
    h100 = catalog.hardware("h100-sxm", "hgx-hopper-8", None)
    b200 = catalog.hardware("b200", "hgx-blackwell-8", None)
    m = catalog.models["llama3-8b"].spec()
    fp8, bf16 = ServePlan(precision="fp8", kv_precision="fp8"), ServePlan(precision="bf16")
    # FP8 GEMMs reach 1,403 TFLOP/s on an H100, BF16 ones 795 (measured MAMF): 1.77 x
    fp8_over_bf16 = gemm_peak(h100.device, fp8) / gemm_peak(h100.device, bf16)
    assert fp8_over_bf16 == pytest.approx(1402.6 / 794.5, rel=2e-3)
    assert rate_weighted_matmul_params(h100.device, fp8, 100.0, 10.0) == pytest.approx(100 + 10 * (fp8_over_bf16 - 1))
    assert rate_weighted_matmul_params(h100.device, bf16, 100.0, 10.0) == 100.0
    # decode: the LM head of every sequence; prefill: of every prompt once, not of every prompt token
    t8, t16 = serve_terms(m, h100, fp8, 64), serve_terms(m, h100, bf16, 64)
    assert t8.gemm_flops - t16.gemm_flops == pytest.approx(2.0 * 64 * LLAMA3_TABLE * (fp8_over_bf16 - 1))
    assert t8.prefill_gemm_flops - t16.prefill_gemm_flops == pytest.approx(2.0 * LLAMA3_TABLE * (fp8_over_bf16 - 1))
    # NVFP4 on Blackwell: the BF16 head takes four FP4 weights' time
    nvfp4 = ServePlan(precision="nvfp4", kv_precision="fp8")
    fp4_over_bf16 = gemm_peak(b200.device, nvfp4) / gemm_peak(b200.device, bf16)
    assert fp4_over_bf16 == pytest.approx(4.0 * 0.763 / 0.776, rel=0.01)  # FP4 takes FP8's measured share
    t4 = serve_terms(m, b200, nvfp4, 64)
    assert t4.gemm_flops == pytest.approx(2.0 * 64 * (active_matmul_params(m) + LLAMA3_TABLE * (fp4_over_bf16 - 1)))


def test_weight_only_int4_and_fp16_accumulation_charge_the_head_nothing_extra(catalog):
    rig = catalog.hardware("rtx-4090", "desktop-4", None)
    for precision in ("awq-int4", "int4", "gguf-q4km"):
        plan = ServePlan(precision=precision, fp16_accumulate=True)
        assert rate_weighted_matmul_params(rig.device, plan, 100.0, 10.0) == 100.0


def test_llama_cpp_dequantises_the_streamed_quantised_weights_only(catalog):
    m = catalog.models["llama3-8b"].spec()
    plan = ServePlan(precision="gguf-q4km", prefill_dequant=True)
    assert dequant_bytes(m, plan) == pytest.approx((param_count(m) - LLAMA3_TABLE) * (BYTES["gguf-q4km"] + 2.0))
    int4 = ServePlan(precision="awq-int4", prefill_dequant=True)
    assert dequant_bytes(m, int4) == pytest.approx(transformer_params(m) * (BYTES["awq-int4"] + 2.0))


def test_fp4_weights_run_in_16_bit_math_without_fp4_tensor_cores(catalog):
    """An FP4 weight on a GPU without FP4 tensor cores is weight-only: it is dequantised into BF16 math
    (Marlin, Triton's matmul_ogs), not multiplied in FP8 (TensorRT-LLM's gpt-oss support matrix: Hopper
    bf16 x mxfp4). gpt-oss's MXFP4 experts take MXFP8 activations where FP4 tensor cores exist
    (Blackwell: mxfp8 x mxfp4, the FP8 rate); NVFP4 checkpoints multiply FP4 by FP4 there."""
    h100, b200, a100 = (catalog.device(g) for g in ("h100-sxm", "b200", "a100-sxm-80gb"))
    assert [math_precision(h100, p) for p in ("mxfp4", "nvfp4", "fp8", "bf16")] == ["bf16", "bf16", "fp8", "bf16"]
    assert [math_precision(b200, p) for p in ("mxfp4", "nvfp4", "fp8")] == ["fp8", "fp4", "fp8"]
    assert [math_precision(a100, p) for p in ("mxfp4", "nvfp4", "fp8")] == ["bf16", "bf16", "bf16"]
    bf16 = ServePlan(precision="bf16")
    assert gemm_peak(h100, ServePlan(precision="mxfp4")) == gemm_peak(h100, bf16)
    assert gemm_peak(b200, ServePlan(precision="mxfp4")) == gemm_peak(b200, ServePlan(precision="fp8"))
    # gpt-oss on an H100: its BF16 attention and head cost nothing extra beside BF16 experts
    assert rate_weighted_matmul_params(h100, ServePlan(precision="mxfp4"), 100.0, 10.0) == 100.0


def test_tensorrt_llm_gpt_oss_rows_are_the_mxfp4_checkpoint(catalog):
    """The TensorRT-LLM perf-overview labels its gpt-oss columns FP4 (Blackwell) and FP8 (Hopper), but
    its FP4 and FP8 model lists leave gpt-oss out: the runs serve OpenAI's MXFP4 checkpoint."""
    ds = load_dataset("serving", catalog)
    gpt_oss = [c for c in ds.cases if c.row.startswith("trtdev-") and c.model.name == "gpt-oss-120b"]
    assert len(gpt_oss) == 22
    assert {c.precision for c in gpt_oss} == {"mxfp4"}


def test_a_routed_expert_read_costs_a_fixed_latency_per_slice_beside_its_bytes(catalog):
    """Mixtral's eight 352 MB experts and DeepSeek-V3's 256 of 44 MB pay the same microseconds per
    expert slice a decode step reads (``weights.expert_ramp``), not one efficiency on every byte."""
    h100 = catalog.hardware("h100-sxm", "hgx-hopper-8", None)
    mixtral, dsv3 = catalog.models["mixtral-8x7b"].spec(), catalog.models["deepseek-v3"].spec()
    tp4, tp8 = ServePlan(tp=4, precision="bf16"), ServePlan(tp=8, precision="fp8")
    # one expert of one layer: gate, up and down matrices, split over the TP group
    assert expert_slice_bytes(mixtral, tp4) == 3 * 4096 * 14336 * 2 / 4  # 88.1 MB
    assert expert_slice_bytes(dsv3, tp8) == 3 * 7168 * 2048 * 1 / 8  # 5.5 MB
    assert expert_slice_bytes(catalog.models["llama3-8b"].spec(), tp4) == 0.0
    # at batch 16 Mixtral's 32 layers touch all but (6/8)^16 of their 8 experts: 253.4 slices a GPU
    t = serve_terms(mixtral, h100, tp4, 16)
    slices = 32 * 8 * (1 - (6 / 8) ** 16)
    assert t.expert_bytes / t.expert_slice == pytest.approx(slices)
    assert expert_ramp(t.expert_bytes, t.expert_slice, 1e-6) == pytest.approx(slices * 1e-6)
    assert expert_ramp(0.0, 0.0, 1e-6) == 0.0  # a dense model
    # TP2 x PP2: a slice is half an expert; a GPU holds 16 layers and a micro-batch of 8 sequences
    # touches all but (6/8)^8 of a layer's experts: 115.2 slices
    tp2pp2 = ServePlan(tp=2, pp=2, precision="bf16")
    assert expert_slice_bytes(mixtral, tp2pp2) == 3 * 4096 * 14336 * 2 / 2
    t22 = serve_terms(mixtral, h100, tp2pp2, 16)
    assert t22.expert_bytes / t22.expert_slice == pytest.approx(16 * 8 * (1 - (6 / 8) ** 8))
    # gpt-oss keeps its experts alone in MXFP4 (4.25 bits a weight): a slice is those bytes only
    gpt_oss = catalog.models["gpt-oss-120b"].spec()
    assert expert_slice_bytes(gpt_oss, ServePlan(tp=2, precision="mxfp4")) == 3 * 2880 * 2880 * 4.25 / 8 / 2
    # and a memory-bound decode step (batch 1, the roofline unsmoothed) takes exactly that much longer
    one = serve_terms(mixtral, h100, tp4, 1)
    slow, fast = (serve_time(one, ServeParams(ridge_slowdown=1.0, expert_latency=x)).decode_step for x in (1e-6, 0.0))
    assert slow - fast == pytest.approx(32 * 2 * 1e-6)  # two experts a layer at batch 1
