"""What a quantised checkpoint's weights take and cost (``optimizer.perf.weights``): quantisers keep
the embedding table and the LM head in 16-bit, gpt-oss keeps everything but its routed experts in
BF16, and a 16-bit GEMM runs at the 16-bit rate."""

import pytest

from optimizer.perf.model import expert_params, param_count
from optimizer.perf.serve import ServePlan, serve_terms
from optimizer.perf.specs import BYTES
from optimizer.perf.weights import (
    active_matmul_params,
    matmul_params_16bit,
    rate_weighted_matmul_params,
    streamed_weight_bytes,
    weight_bytes,
)


def test_fp8_and_nvfp4_keep_the_embedding_and_head_in_16_bit(catalog):
    m = catalog.models["llama3-70b"].spec()
    table = 128256 * 8192  # Llama 3's untied embedding and LM head, each
    assert weight_bytes(m, "bf16") == pytest.approx(2 * 70.55e9, rel=2e-3)
    # nvidia/Llama-3.1-70B-Instruct-FP8 holds about 72.7 GB: 68.5 B FP8 weights and 2 x 1.05 B in BF16
    assert weight_bytes(m, "fp8") == pytest.approx(70.55e9 - 2 * table + 2 * 2 * table, rel=2e-3)
    # (and the final norm, also 16-bit)
    assert weight_bytes(m, "fp8") - weight_bytes(m, "bf16") / 2 == pytest.approx(2 * table, rel=1e-5)
    # a decode step streams the LM head, not the input table
    assert weight_bytes(m, "fp8") - streamed_weight_bytes(m, "fp8") == pytest.approx(2 * table)
    assert weight_bytes(m, "nvfp4") - streamed_weight_bytes(m, "nvfp4") == pytest.approx(2 * table)
    assert matmul_params_16bit(m, "fp8") == table and matmul_params_16bit(m, "bf16") == 0


def test_gpt_oss_keeps_all_but_its_experts_in_bf16(catalog):
    m = catalog.models["gpt-oss-120b"].spec()
    # the model card: 116.8 B parameters, checkpoint of about 65 GB (MXFP4 experts, BF16 rest)
    assert weight_bytes(m, "mxfp4") / 1e9 == pytest.approx(65, rel=0.03)
    rest = param_count(m) - expert_params(m)
    assert weight_bytes(m, "mxfp4") == pytest.approx(expert_params(m) * BYTES["mxfp4"] + 2 * rest)
    # a token multiplies its attention and router in BF16, its four experts in MXFP4
    assert 0 < matmul_params_16bit(m, "mxfp4") < active_matmul_params(m)


def test_a_16_bit_gemm_runs_at_the_16_bit_rate(catalog):
    h100 = catalog.hardware("h100-sxm", "hgx-hopper-8", None).device
    fp8 = ServePlan(precision="fp8", kv_precision="fp8")
    # FP8 peak twice BF16's on Hopper: a 16-bit weight costs two FP8 ones
    assert rate_weighted_matmul_params(h100, fp8, 100.0, 10.0) == pytest.approx(110.0, rel=1e-3)
    assert rate_weighted_matmul_params(h100, ServePlan(precision="bf16"), 100.0, 10.0) == 100.0
    m = catalog.models["llama3-8b"].spec()
    hw = catalog.hardware("h100-sxm", "hgx-hopper-8", None)
    t8, t16 = serve_terms(m, hw, fp8, 64), serve_terms(m, hw, ServePlan(precision="bf16"), 64)
    head = 2.0 * 64 * 128256 * 4096
    assert t8.gemm_flops - t16.gemm_flops == pytest.approx(head, rel=2e-3)  # FP8 peak 2.001 x BF16
