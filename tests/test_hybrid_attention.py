"""Hybrid linear-attention models (Qwen3-Next, Qwen3.5): three layers in four mix tokens with Gated
DeltaNet (Yang et al. 2024, arXiv 2412.06464), which keeps a fixed recurrent state per sequence
instead of a KV cache; the fourth attends in full. The figures below are worked by hand from the
published configs (catalogs/models.yaml)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optimizer.perf.memory import activation_bytes_per_layer
from optimizer.perf.model import (
    hardware_flops_per_token,
    linear_activation_width,
    linear_attention_flops_per_token,
    linear_state_values,
    matmul_params_per_layer,
    model_flops_per_token,
    param_count,
)
from optimizer.perf.params import ServeParams
from optimizer.perf.serve import ServePlan, max_batch, serve
from optimizer.perf.serve_memory import (
    decode_cache_bytes,
    kv_bytes_per_gpu,
    kv_bytes_per_token,
    serve_memory,
    state_bytes_per_gpu,
)
from optimizer.perf.specs import TrainPlan
from optimizer.perf.train import NO_FLASH_SCORE_BYTES, replica_terms

# Qwen3.5-9B: 32 layers, 8 of them full attention (4 KV heads of 256), 24 Gated DeltaNet layers of
# 16 key and 32 value heads of 128, a convolution of kernel 4 over Q, K and V (2 x 2,048 + 4,096 wide)
STATE_VALUES = 32 * 128 * 128 + 3 * (2 * 2048 + 4096)  # 548,864 a layer
KV_PER_TOKEN = 2 * 8 * 4 * 256 * 2  # K and V, 8 layers, 4 heads of 256, 2 bytes: 32,768


@pytest.fixture
def q9(catalog):
    return catalog.models["qwen3.5-9b"].spec()


def test_only_the_full_attention_layers_cache_keys_and_values(q9):
    assert q9.attended(1000.0) == pytest.approx(250.0)  # 8 of 32 layers attend to the context
    assert kv_bytes_per_token(q9, "bf16") == KV_PER_TOKEN
    plan = ServePlan(precision="bf16", kv_precision="bf16")
    growth = kv_bytes_per_gpu(q9, plan, 2000.0) - kv_bytes_per_gpu(q9, plan, 1000.0)
    assert growth == pytest.approx(1000 * KV_PER_TOKEN)


def test_the_recurrent_state_is_fixed_split_by_tp_and_read_and_written_each_step(q9):
    assert linear_state_values(q9) == STATE_VALUES
    one = ServePlan(precision="bf16", kv_precision="bf16")
    assert state_bytes_per_gpu(q9, one) == 24 * STATE_VALUES * 2  # 26.3 MB a sequence at 16 bits
    assert state_bytes_per_gpu(q9, replace(one, tp=2)) == pytest.approx(24 * STATE_VALUES)
    held = kv_bytes_per_gpu(q9, one, 1000.0)
    assert held == pytest.approx(1000 * KV_PER_TOKEN + 24 * STATE_VALUES * 2)
    # a decode step reads the KV cache once and the state twice (read, then written back)
    assert decode_cache_bytes(q9, one, 1000.0, 1.0) == pytest.approx(held + 24 * STATE_VALUES * 2)
    dense = replace(q9, linear_layers=0)
    assert state_bytes_per_gpu(dense, one) == 0.0
    assert decode_cache_bytes(dense, one, 1000.0, 1.0) == kv_bytes_per_gpu(dense, one, 1000.0)


def test_the_memory_breakdown_names_the_recurrent_state_apart_from_the_kv_cache(q9):
    plan = ServePlan(precision="bf16", kv_precision="bf16", input_len=1000, output_len=0)
    memory = serve_memory(q9, plan, 10)
    assert memory["kv_cache"] == pytest.approx(10 * 1000 * KV_PER_TOKEN)
    assert memory["recurrent_state"] == pytest.approx(10 * 24 * STATE_VALUES * 2)
    assert sum(memory.values()) == pytest.approx(sum(serve_memory(q9, plan, 0).values())
                                                 + 10 * kv_bytes_per_gpu(q9, plan, 1000.0))
    # a model without linear layers shows no such line
    assert "recurrent_state" not in serve_memory(replace(q9, linear_layers=0), plan, 10)


def test_a_hybrid_holds_more_long_sequences_than_the_same_shape_attending_in_full(q9, catalog):
    hw = catalog.hardware("h100-sxm", "hgx-hopper-8", None)
    plan = ServePlan(precision="bf16", kv_precision="bf16", input_len=32000, output_len=1000)
    hybrid = max_batch(q9, hw, plan)
    full = max_batch(replace(q9, linear_layers=0), hw, plan)
    # 32 layers of KV against 8 and a 26 MB state: at 32k tokens about 3.5 times the sequences
    assert hybrid > 3 * full > 0


def test_training_flops_grow_with_the_context_only_in_the_full_attention_layers(q9):
    assert linear_attention_flops_per_token(q9) == 8 * 32 * 128 * 128
    # 3 x (forward scores and context 2·s·heads·(qk + v) dims) over 8 layers, per extra token of context
    extra = model_flops_per_token(q9, 8192) - model_flops_per_token(q9, 4096)
    assert extra == pytest.approx(3 * 2 * 4096 * 16 * (256 + 256) * 8)


def test_training_keeps_each_layer_types_own_activations(q9):
    # a Gated DeltaNet layer: the convolution's input (2 x 2,048 + 4,096), Q and K repeated to the 32
    # value heads (2 x 4,096) and V (4,096) for the kernel, the WY matrix (64 a head) and about 10
    # more a head, the gated norm's input and gate and the output projection's input (3 x 4,096)
    assert linear_activation_width(q9) == 8192 + 8192 + 4096 + 32 * 74 + 12288  # 35,136
    # a full layer: Q 4,096, K and V 1,024 each, the output 4,096, its gate and the gated output 2 x 4,096
    full = 4096 + 2 * 1024 + 4096 + 2 * 4096
    s = 4096
    per_token = 10 * 4096 + 2 * (8 * full + 24 * 35136) / 32 + 6 * 12288  # Korthikanti et al. Table 2, selective
    assert activation_bytes_per_layer(q9, s, 1, 1, "selective", False) == pytest.approx(s * per_token)
    # without FlashAttention only the 8 full layers keep their scores (5·a·s² a layer)
    extra = activation_bytes_per_layer(q9, s, 1, 1, "none", False) - activation_bytes_per_layer(q9, s, 1, 1,
                                                                                            "selective", False)
    assert extra == pytest.approx(5 * 16 * s * s * 8 / 32)


def test_without_flash_attention_only_the_full_layers_move_scores_through_memory(q9, catalog):
    hw = catalog.hardware("h100-sxm", "hgx-hopper-8", None)
    plan = TrainPlan(tp=1, pp=1, dp=1, micro_batch=1, recompute="none", zero=0, seq_len=4096, flash_attention=False)
    terms = replica_terms(q9, hw, plan)
    # 27 bytes a score, 16 heads, 4,096 x 4,096 scores, on the 8 full-attention layers of 32
    assert terms.score_bytes == pytest.approx(NO_FLASH_SCORE_BYTES * 16 * 4096 * 4096 * 8)


def test_the_output_gate_and_the_delta_net_layers_are_counted_in_the_parameters(q9):
    # a full layer's Q projection also computes the gate: one more 4,096 x 4,096 matrix on each of 8 layers
    assert param_count(q9) - param_count(replace(q9, attn_output_gate=False)) == 8 * 4096 * 4096
    # a Gated DeltaNet layer: in-projections to Q, K, V, Z (2 x 2,048 + 2 x 4,096) and to a, b (2 x 32),
    # the output projection (4,096 wide), the convolution (8,192 x 4) and 2 x 32 + 128 small weights
    delta_net = 4096 * 12288 + 4096 * 64 + 4096 * 4096 + 8192 * 4 + 64 + 128
    gated_attention = 3 * 4096 * 4096 + 2 * 4096 * 1024
    assert param_count(q9) - param_count(replace(q9, linear_layers=0)) == 24 * (delta_net - gated_attention)


def test_a_hybrid_moe_serves_end_to_end(catalog):
    m = catalog.models["qwen3.5-35b-a3b"].spec()
    hw = catalog.hardware("h200-sxm", "hgx-hopper-8", None)
    plan = ServePlan(precision="bf16", kv_precision="bf16", input_len=1000, output_len=1000)
    short, long = serve(m, hw, plan, ServeParams()), serve(m, hw, replace(plan, input_len=8000), ServeParams())
    assert short.fits and short.max_batch > 0 and short.output_tokens_per_s > 0
    # the state does not grow with the prompt: eight times the prompt holds far more than an eighth the sequences
    assert long.max_batch > short.max_batch / 4


def test_a_hybrid_shape_without_its_linear_heads_is_refused_with_a_fix(tmp_path):
    from click.testing import CliRunner

    from optimizer.cli import main

    shape = tmp_path / "hybrid.yaml"
    shape.write_text("layers: 32\nhidden: 4096\nheads: 16\nkv_heads: 4\nhead_dim: 256\nffn_hidden: 12288\n"
                     "vocab: 248320\nseq_len: 4096\nmlp: swiglu\nlinear_layers: 24\nlinear_key_heads: 16\n")
    out = CliRunner().invoke(main, ["estimate", "serve", "--model", str(shape), "--gpu", "h100-sxm", "--gpus", "1",
                                    "--input-len", "100", "--output-len", "100"])
    assert out.exit_code == 2
    assert "linear_value_heads and linear_head_dim" in out.output and "field ''" not in out.output


def test_the_convolution_width_comes_from_the_shape(q9):
    """The causal convolution keeps its last kernel − 1 inputs of Q, K and V per layer and has
    kernel weights per channel: a width of 6 instead of 4 adds two of each (2 x 2,048 + 4,096 =
    8,192 channels in each of the 24 linear layers)."""
    wide = replace(q9, linear_conv_kernel=6)
    assert linear_state_values(wide) - linear_state_values(q9) == 2 * 8192
    assert param_count(wide) - param_count(q9) == 24 * 2 * 8192


def test_full_recompute_repeats_the_delta_rule_too(q9):
    """Full recompute repeats every layer's forward, a Gated DeltaNet layer's delta rule with it
    (8 FLOPs per state value: 24 layers x 32 value heads x 128 x 128); selective recompute repeats
    only softmax attention's scores and context, which both modes add alike."""
    extra = hardware_flops_per_token(q9, "full") - hardware_flops_per_token(q9, "selective")
    assert extra == pytest.approx(2.0 * matmul_params_per_layer(q9) * 32 + 24 * 8 * 32 * 128 * 128)
