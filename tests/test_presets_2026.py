"""Presets of 2024-2026 models: shapes and counts that follow from their published configs and cards.

Every expected number below is worked out by hand from the model's config.json (or its card/report),
not read back from the catalog.
"""

from __future__ import annotations

import pytest

from optimizer.perf.model import (
    active_param_count,
    attention_params,
    embedding_params,
    final_norm_params,
    moe_params,
    param_count,
    transformer_params,
)
from optimizer.perf.serve import kv_bytes_per_token

NEW_MOE = ("mixtral-8x22b", "deepseek-r1", "deepseek-v3.1", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b",
           "gpt-oss-120b", "llama4-maverick", "glm-4.5", "glm-4.6", "glm-4.5-air", "kimi-k2", "llama4-scout")


def test_every_moe_preset_has_a_published_active_count_within_two_percent(catalog):
    moe = [m for m in catalog.models.values() if m.experts]
    assert set(NEW_MOE) <= {m.id for m in moe}
    for m in moe:
        assert m.published_active_params_b, m.id
        assert active_param_count(m.spec()) / 1e9 == pytest.approx(
            m.published_active_params_b, rel=0.02, abs=m.published_rounding_b), m.id


@pytest.mark.parametrize(("preset", "expected"), [
    # 2 (K and V) x layers x kv_heads x head_dim x 2 bytes
    ("qwen3-8b", 2 * 36 * 8 * 128 * 2),  # 147,456
    ("qwen3-32b", 2 * 64 * 8 * 128 * 2),  # 262,144
    ("qwen3-30b-a3b", 2 * 48 * 4 * 128 * 2),  # 98,304
    ("qwen3-235b-a22b", 2 * 94 * 4 * 128 * 2),  # 192,512
    ("gpt-oss-20b", 2 * 24 * 8 * 64 * 2),  # 49,152
    ("gpt-oss-120b", 2 * 36 * 8 * 64 * 2),  # 73,728
    ("gemma3-27b", 2 * 62 * 16 * 128 * 2),  # 507,904
    ("llama4-maverick", 2 * 48 * 8 * 128 * 2),  # 196,608
    ("glm-4.5", 2 * 92 * 8 * 128 * 2),  # 376,832
    ("glm-4.5-air", 2 * 46 * 8 * 128 * 2),  # 188,416
    ("internlm-20b", 2 * 60 * 40 * 128 * 2),  # 1,228,800 (full multi-head attention)
    # MLA caches one latent (kv_lora_rank 512 + rotary key 64) per layer
    ("deepseek-r1", 61 * (512 + 64) * 2),  # 70,272
])
def test_kv_cache_bytes_per_token_from_the_configs(catalog, preset, expected):
    assert kv_bytes_per_token(catalog.models[preset].spec(), "bf16") == expected


def test_head_size_apart_from_hidden_over_heads(catalog):
    q32 = catalog.models["qwen3-32b"].spec()
    assert (q32.head_dim, q32.q_hidden, q32.kv_hidden) == (128, 8192, 1024)  # hidden // heads would be 80
    assert attention_params(q32) == 2 * 5120 * 8192 + 2 * 5120 * 1024
    oss = catalog.models["gpt-oss-120b"].spec()
    assert (oss.head_dim, oss.q_hidden, oss.kv_hidden) == (64, 4096, 512)  # hidden // heads would be 45
    g12 = catalog.models["gemma3-12b"].spec()
    assert (g12.head_dim, g12.q_hidden) == (256, 4096)  # over a hidden of 3,840
    glm = catalog.models["glm-4.5"].spec()
    assert (glm.head_dim, glm.q_hidden, glm.kv_hidden) == (128, 12288, 1024)  # hidden // heads would be 53
    air = catalog.models["glm-4.5-air"].spec()
    assert (air.head_dim, air.q_hidden, air.kv_hidden) == (128, 12288, 1024)  # over a hidden of 4,096


def test_gpt_oss_120b_matches_the_model_cards_component_counts(catalog):
    """Card Table 1: MLP 114.71 B, attention 0.96 B, embed + unembed 1.16 B (biases and sinks are < 0.05 %)."""
    m = catalog.models["gpt-oss-120b"].spec()
    assert m.moe_layers == 36 and m.dense_layers == 0
    assert 36 * moe_params(m) / 1e9 == pytest.approx(114.71, rel=0.001)
    assert 36 * attention_params(m) / 1e9 == pytest.approx(0.96, rel=0.005)
    assert embedding_params(m) == 2 * 201088 * 2880
    assert embedding_params(m) / 1e9 == pytest.approx(1.16, rel=0.005)
    # the card's 5.13 B active counts the unembedding, not the input-embedding lookup
    assert (active_param_count(m) - 201088 * 2880) / 1e9 == pytest.approx(5.13, rel=0.002)


def test_kimi_k2_is_deepseek_v3s_architecture_at_384_experts(catalog):
    """Kimi K2's config: DeepSeek-V3's layer with 64 MLA heads (not 128), 384 routed experts (not 256) and one
    dense layer (not 3), vocab 163,840. Its card's '32 billion activated' leaves out the input-embedding lookup,
    as DeepSeek-V3's '37B' does: rounded, 36.63B without it gives 37 and 37.55B with it would give 38."""
    k, v3 = catalog.models["kimi-k2"].spec(), catalog.models["deepseek-v3"].spec()
    assert (k.heads, k.experts, k.dense_layers, k.moe_layers, k.vocab) == (64, 384, 1, 60, 163840)
    assert (k.hidden, k.expert_ffn_hidden, k.kv_lora_rank, k.q_lora_rank) == (v3.hidden, 2048, 512, 1536)
    assert param_count(k) / 1e9 == pytest.approx(1026.5, rel=0.001)  # the Hub's safetensors count
    lookup = 163840 * 7168
    assert round((active_param_count(k) - lookup) / 1e9) == 32
    assert round((active_param_count(v3) - 129280 * 7168) / 1e9) == 37
    assert round(active_param_count(v3) / 1e9) == 38


def test_gemma3_non_embedding_counts_match_the_report(catalog):
    """Gemma 3 report Table 1: 10,759 M and 25,600 M non-embedding parameters; embeddings tied."""
    for preset, non_embedding in (("gemma3-12b", 10.759), ("gemma3-27b", 25.600)):
        m = catalog.models[preset].spec()
        assert m.tied_embeddings and embedding_params(m) == m.vocab * m.hidden
        assert (transformer_params(m) + final_norm_params(m)) / 1e9 == pytest.approx(non_embedding, rel=0.001)


def test_nemotron4_non_embedding_counts_match_the_reports(catalog):
    for preset, non_embedding in (("nemotron4-15b", 12.5), ("nemotron4-340b", 331.6)):
        m = catalog.models[preset].spec()
        assert m.mlp == "relu2" and not m.tied_embeddings
        assert (param_count(m) - embedding_params(m)) / 1e9 == pytest.approx(non_embedding, rel=0.002)


def test_qwen25_half_b_is_the_released_checkpoint_less_its_qkv_biases(catalog):
    m = catalog.models["qwen2.5-0.5b"].spec()
    qkv_biases = 24 * (896 + 2 * 2 * 64)  # per layer: Q (14 x 64) + K and V (2 x 64 each)
    assert param_count(m) + qkv_biases == 494_032_768


@pytest.mark.parametrize(("preset", "window", "period", "layers"), [
    ("gpt-oss-20b", 128, 2, 24),  # layer_types alternate sliding / full
    ("gpt-oss-120b", 128, 2, 36),
    ("gemma3-12b", 1024, 6, 48),  # sliding_window_pattern 6: every sixth layer is global
    ("gemma3-27b", 1024, 6, 62),  # global layers 6, 12, ..., 60: 10 of 62
    ("llama4-maverick", 8192, 4, 48),  # every fourth layer global (NoPE), the others chunked (approximated)
    ("llama4-scout", 8192, 4, 48),
])
def test_windowed_layers_follow_the_configs(catalog, preset, window, period, layers):
    m = catalog.models[preset].spec()
    assert (m.sliding_window, m.sliding_layers, m.layers) == (window, layers - layers // period, layers)


def test_gpt_oss_attends_to_half_the_context_plus_half_a_window(catalog):
    m = catalog.models["gpt-oss-120b"].spec()
    assert m.attended(8192) == pytest.approx((18 * 128 + 18 * 8192) / 36)  # 4,160
    assert m.attended(64) == 64  # shorter than the window: every layer sees everything


def test_llama4_maverick_interleaves_dense_and_moe_layers(catalog):
    m = catalog.models["llama4-maverick"].spec()
    assert (m.moe_layers, m.dense_layers, m.ffn_hidden, m.expert_ffn_hidden) == (24, 24, 16384, 8192)
    assert (m.experts, m.experts_active, m.shared_experts) == (128, 1, 1)


def test_llama4_scout_is_all_moe_and_its_card_counts_the_vision_encoder(catalog):
    """Scout: every layer MoE (16 experts, top-1, a shared expert), no dense layer. The card's 109B total is the
    whole multimodal checkpoint: the text model from config.json plus the vision encoder and projector worked
    out by hand from vision_config (34 layers of width 1,408, MLP 5,632, with biases)."""
    m = catalog.models["llama4-scout"].spec()
    assert (m.moe_layers, m.dense_layers, m.experts, m.experts_active, m.shared_experts) == (48, 0, 16, 1, 1)
    layer = 4 * 1408 * 1408 + 4 * 1408 + 2 * 1408 * 5632 + 5632 + 1408 + 4 * 1408  # attention, MLP, 2 norms
    vision = (34 * layer + 1408 + 577 * 1408 + 3 * 14 * 14 * 1408 + 4 * 1408  # class, position, patch, norms
              + 5632 * 4096 + 4096 * 4096 + 4096 * 5120)  # pixel-shuffle adapter, projector to the text width
    assert vision == 871_932_416
    assert round((param_count(m) + vision) / 1e9) == 109
    assert catalog.models["llama4-scout"].published_params_b == pytest.approx(109 - vision / 1e9, abs=0.005)
    assert round(active_param_count(m) / 1e9) == 17  # Meta counts the input embedding in the 17B


@pytest.mark.parametrize(("copy", "original"), [
    ("deepseek-r1", "deepseek-v3"), ("deepseek-v3.1", "deepseek-v3"), ("llama3.3-70b", "llama3.1-70b"),
])
def test_same_shape_presets_are_exact_copies(catalog, copy, original):
    a, b = catalog.models[copy], catalog.models[original]
    assert a.spec().__dict__ | {"name": ""} == b.spec().__dict__ | {"name": ""}
    assert a.source != b.source


def test_glm_presets_follow_their_configs(catalog):
    """first_k_dense_replace 3 / 1 leading dense layers, then MoE layers of routed experts plus one shared expert."""
    for preset in ("glm-4.5", "glm-4.6"):
        m = catalog.models[preset].spec()
        assert (m.layers, m.dense_layers, m.moe_layers, m.hidden, m.ffn_hidden) == (92, 3, 89, 5120, 12288)
        assert (m.experts, m.experts_active, m.shared_experts, m.expert_ffn_hidden) == (160, 8, 1, 1536)
        assert (m.vocab, m.tied_embeddings) == (151552, False)
    air = catalog.models["glm-4.5-air"].spec()
    assert (air.layers, air.dense_layers, air.moe_layers, air.hidden, air.ffn_hidden) == (46, 1, 45, 4096, 10944)
    assert (air.experts, air.experts_active, air.shared_experts, air.expert_ffn_hidden) == (128, 8, 1, 1408)


def test_glm_46_is_glm_45_with_a_longer_context(catalog):
    a, b = catalog.models["glm-4.6"].spec(), catalog.models["glm-4.5"].spec()
    assert (a.seq_len, b.seq_len) == (202752, 131072)  # max_position_embeddings of each config.json
    assert a.__dict__ | {"name": "", "seq_len": 0} == b.__dict__ | {"name": "", "seq_len": 0}


def _glm_mtp_block(h, q, kv, experts, width):
    """The multi-token-prediction layer the checkpoints add (and serving does not run): one MoE decoder layer
    (attention, 2 norms, routed + shared experts, router), eh_proj (2h -> h) and its enorm, hnorm and head norm."""
    return 2 * h * q + 2 * h * kv + 2 * h + (experts + 1) * 3 * h * width + h * experts + 2 * h * h + 3 * h


@pytest.mark.parametrize(("preset", "card_total", "card_active", "with_mtp", "mtp"), [
    # GLM-4.5: 355B total / 32B active; the 355B counts the MTP block (non-embedding: 351.24B + 3.99B = 355.23B)
    ("glm-4.5", 355, 32, True, _glm_mtp_block(5120, 96 * 128, 8 * 128, 160, 1536)),
    # GLM-4.5-Air: 106B total / 12B active; the 106B does not (non-embedding: 105.61B)
    ("glm-4.5-air", 106, 12, False, _glm_mtp_block(4096, 96 * 128, 8 * 128, 128, 1408)),
])
def test_glm_cards_count_no_embeddings(catalog, preset, card_total, card_active, with_mtp, mtp):
    """The cards' counts leave out the embedding and the output layer (2 x 151,552 x hidden); the preset keeps
    both and leaves out the MTP block, and its published figures restate the card's that way."""
    p = catalog.models[preset]
    m = p.spec()
    embed = 2 * 151552 * m.hidden
    assert embedding_params(m) == embed
    total = param_count(m) - embed + (mtp if with_mtp else 0)
    assert total / 1e9 == pytest.approx(card_total, rel=0.005)
    assert (active_param_count(m) - embed) / 1e9 == pytest.approx(card_active, rel=0.02)
    restated = card_total + embed / 1e9 - (mtp / 1e9 if with_mtp else 0)
    assert p.published_params_b == pytest.approx(restated, abs=0.005)
    assert p.published_active_params_b == pytest.approx(card_active + embed / 1e9, abs=0.005)
    assert param_count(m) / 1e9 == pytest.approx(p.published_params_b, rel=0.005)


def test_internlm_20b_is_its_released_checkpoint(catalog):
    """internlm/internlm-20b: pytorch_model.bin.index.json total_size 40,177,428,480 bytes of bf16; no biases."""
    m = catalog.models["internlm-20b"].spec()
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.vocab) == (60, 5120, 40, 40, 13824, 103168)
    assert param_count(m) == 40_177_428_480 // 2
    assert param_count(m) / 1e9 == pytest.approx(catalog.models["internlm-20b"].published_params_b, rel=0.005)
