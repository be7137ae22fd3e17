"""A model's shape from a Hugging Face config.json (issue 15, item 11): the published configs of
catalog presets give the presets' own shapes, and architectures the model does not cover are
refused with their name and a fix, never guessed."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from optimizer.cli import main
from optimizer.errors import ProblemError
from optimizer.problem import resolve_model

# the keys each model's published config.json gives (huggingface.co/<repo>/blob/main/config.json)
CONFIGS = {
    "llama2-7b": {"model_type": "llama", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 11008,
                  "max_position_embeddings": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
                  "num_key_value_heads": 32, "tie_word_embeddings": False, "vocab_size": 32000},
    "mixtral-8x7b": {"model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
                     "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 32,
                     "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
                     "tie_word_embeddings": False, "vocab_size": 32000},
    "qwen3-30b-a3b": {"model_type": "qwen3_moe", "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
                      "moe_intermediate_size": 768, "max_position_embeddings": 40960, "num_attention_heads": 32,
                      "num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
                      "num_experts_per_tok": 8, "mlp_only_layers": [], "tie_word_embeddings": False,
                      "vocab_size": 151936},
    "deepseek-v3": {"model_type": "deepseek_v3", "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "max_position_embeddings": 163840, "num_attention_heads": 128,
                    "num_hidden_layers": 61, "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
                    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "tie_word_embeddings": False,
                    "vocab_size": 129280},
    "qwen3-next-80b-a3b": {"model_type": "qwen3_next", "hidden_act": "silu", "hidden_size": 2048,
                           "intermediate_size": 5120, "moe_intermediate_size": 512,
                           "shared_expert_intermediate_size": 512, "max_position_embeddings": 262144,
                           "num_attention_heads": 16, "num_hidden_layers": 48, "num_key_value_heads": 2,
                           "head_dim": 256, "num_experts": 512, "num_experts_per_tok": 10, "mlp_only_layers": [],
                           "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                           "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
                           "tie_word_embeddings": False, "vocab_size": 151936},
    # Qwen3.5's MoE config: a multimodal wrapper whose text model lists its layer types and has no dense MLP width
    "qwen3.5-35b-a3b": {"model_type": "qwen3_5_moe", "text_config": {
        "model_type": "qwen3_5_moe_text", "hidden_act": "silu", "hidden_size": 2048, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "max_position_embeddings": 262144, "num_attention_heads": 16,
        "num_hidden_layers": 40, "num_key_value_heads": 2, "head_dim": 256, "num_experts": 256,
        "num_experts_per_tok": 8, "layer_types": ["linear_attention"] * 3 * 10 + ["full_attention"] * 10,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_value_head_dim": 128, "attn_output_gate": True,
        "tie_word_embeddings": False, "vocab_size": 248320}},
    # the flagship: 512 experts, top-10, 64 value heads a linear layer; every fourth layer by interval
    "qwen3.5-397b-a17b": {"model_type": "qwen3_5_moe", "text_config": {
        "model_type": "qwen3_5_moe_text", "hidden_act": "silu", "hidden_size": 4096, "moe_intermediate_size": 1024,
        "shared_expert_intermediate_size": 1024, "max_position_embeddings": 262144, "num_attention_heads": 32,
        "num_hidden_layers": 60, "num_key_value_heads": 2, "head_dim": 256, "num_experts": 512,
        "num_experts_per_tok": 10, "full_attention_interval": 4, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 64,
        "linear_value_head_dim": 128, "attn_output_gate": True, "tie_word_embeddings": False, "vocab_size": 248320}},
    "gemma3-27b": {"model_type": "gemma3", "text_config": {
        "model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 5376,
        "intermediate_size": 21504, "max_position_embeddings": 131072, "num_attention_heads": 32,
        "num_hidden_layers": 62, "num_key_value_heads": 16, "head_dim": 128, "sliding_window": 1024,
        "sliding_window_pattern": 6, "vocab_size": 262208}},
}


@pytest.mark.parametrize("preset", sorted(CONFIGS))
def test_a_published_config_gives_the_presets_shape(preset, catalog, tmp_path):
    path = tmp_path / preset / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(CONFIGS[preset]))
    for ref in (str(path), str(path.parent)):  # the file, or the directory holding it
        spec = resolve_model(ref, catalog, tmp_path / "p.yaml")
        want = catalog.models[preset].spec()
        # the preset's context is its training one; the config's is the longest it was extended to
        assert _tied(replace(spec, name=want.name, seq_len=want.seq_len)) == _tied(want)
        text = CONFIGS[preset].get("text_config", CONFIGS[preset])
        assert spec.seq_len == text["max_position_embeddings"]


def _tied(spec):
    """A preset leaves tying unsaid where it is the default (untied for SwiGLU blocks, tied for GELU)."""
    return replace(spec, tie_embeddings=spec.mlp == "gelu" if spec.tie_embeddings is None else spec.tie_embeddings)


@pytest.mark.parametrize("config, words", [
    ({"model_type": "mamba", "hidden_size": 768}, ["architecture 'mamba'", "not one the performance model covers",
                                                   "spell the shape out"]),
    ({"model_type": "llama", "hidden_size": 4096}, ["lacks the key 'num_attention_heads'"]),
    ({"model_type": "llama", "hidden_act": "relu", **{k: 8 for k in ("hidden_size", "intermediate_size",
      "num_attention_heads", "num_hidden_layers", "vocab_size", "max_position_embeddings")}}, ["activation 'relu'"]),
    ("not json", ["not a readable JSON file"]),
    ({**CONFIGS["qwen3-next-80b-a3b"], "full_attention_interval": 0}, ["not a positive whole number"]),
    ({**CONFIGS["qwen3-next-80b-a3b"], "num_attention_heads": "sixteen"}, ["not a positive whole number"]),
    ({**CONFIGS["qwen3-next-80b-a3b"], "linear_value_head_dim": 64}, ["take", "one head size"]),
    ({k: v for k, v in CONFIGS["qwen3-next-80b-a3b"].items() if k != "linear_num_value_heads"},
     ["lacks the key 'linear_num_value_heads'"]),
    ({**CONFIGS["qwen3-next-80b-a3b"], "layer_types": ["linear_attention"] * 3 + ["full_attention"]},
     ["layer_types names 4 layers where num_hidden_layers is 48"]),
    ({**CONFIGS["qwen3-next-80b-a3b"], "layer_types": ["linear_attention"] * 48}, ["linear_layers"]),
])
def test_a_config_the_model_cannot_read_is_refused_with_a_fix(config, words, catalog, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    with pytest.raises(ProblemError) as err:
        resolve_model(str(path), catalog, tmp_path / "p.yaml")
    for w in words:
        assert w in str(err.value), str(err.value)
    r = CliRunner().invoke(main, ["estimate", "train", "--model", str(path), "--gpu", "h100-sxm", "--gpus", "8"])
    assert r.exit_code == 2 and words[0] in r.output and "Traceback" not in r.output


def test_a_configs_convolution_width_is_read(catalog, tmp_path):
    """``linear_conv_kernel_dim`` is 4 in every published Qwen3-Next and Qwen3.5 config; another
    width is taken as given (the state and the weights grow with it), not assumed to be 4."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIGS["qwen3-next-80b-a3b"], "linear_conv_kernel_dim": 6}))
    assert resolve_model(str(path), catalog, tmp_path / "p.yaml").linear_conv_kernel == 6
    assert catalog.models["qwen3-next-80b-a3b"].spec().linear_conv_kernel == 4
