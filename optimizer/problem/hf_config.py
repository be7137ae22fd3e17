"""A model's shape from a Hugging Face ``config.json`` read from disk (offline): the keys the
transformers library's configuration classes publish, mapped onto the shape the performance
model needs (``InlineModel``).

Covered: decoder-only transformers with a dense MLP (GPT-2's 4h GELU, or the gated SwiGLU / GeGLU
of Llama, Mistral, Qwen2/3, Gemma 1-3, Phi-3, OLMo, Granite, InternLM2), mixtures of experts
(Mixtral, Qwen2-MoE / Qwen3-MoE, DeepSeek-V2/V3 with multi-head latent attention), hybrids of
linear and full attention (Qwen3-Next, Qwen3.5) and the text model of a multimodal config
(``text_config``). ``seq_len`` is the config's ``max_position_embeddings``: a training workload
sets its own (``workload.seq_len``).
Anything else is refused with the architecture named, never guessed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optimizer.errors import ProblemError

GATED = ("silu", "swish", "gelu_pytorch_tanh", "gelu_new", "gelu")  # gated MLPs: 3 matrices of ffn width
DENSE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "olmo", "olmo2", "granite",
         "internlm2")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")
# hybrid Gated DeltaNet + gated full attention, dense or MoE (Qwen3-Next, Qwen3.5)
HYBRID = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")


def is_hf_config(ref: str, base: Path) -> Path | None:
    """The config.json a model reference names (the file, or a directory holding one), or None."""
    path = Path(ref) if Path(ref).is_absolute() else base / ref
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    return path if path.name.endswith(".json") and path.is_file() else None


def read_hf_config(file: Path) -> dict[str, Any]:
    """The shape keys (``InlineModel`` fields) of a Hugging Face config.json."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProblemError(f"{file}: not a readable JSON file ({exc}). To fix: point the model at a Hugging Face "
                           "config.json.") from None
    if not isinstance(data, dict):
        raise ProblemError(f"{file}: expected a JSON object (a Hugging Face config.json).")
    text = data.get("text_config")
    cfg = {**data, **text} if isinstance(text, dict) else data
    kind = str(cfg.get("model_type", data.get("model_type", "")))
    try:
        if kind == "gpt2":
            return _gpt2(cfg)
        if kind in DENSE or kind in MOE:
            return {**_decoder(cfg, file, kind), **_experts(cfg, kind)}
        if kind in HYBRID:
            return _hybrid(cfg, file, kind)
    except KeyError as exc:
        raise ProblemError(f"{file}: model_type '{kind}' lacks the key {exc}. To fix: use the model's own "
                           "config.json, or spell the shape out in the problem file.") from None
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise ProblemError(f"{file}: model_type '{kind}' has a key whose value is not a positive whole number "
                           f"({exc}). To fix: use the model's own config.json, or spell the shape out in the "
                           "problem file.") from None
    covered = ", ".join(("gpt2",) + DENSE + MOE + HYBRID)
    raise ProblemError(f"{file}: architecture '{kind or 'unknown'}' (model_type) is not one the performance model "
                       f"covers ({covered}). To fix: spell the shape out in the problem file (layers, hidden, heads, "
                       "kv_heads, ffn_hidden, vocab, seq_len, mlp) or use a preset.")


def _gpt2(cfg: dict[str, Any]) -> dict[str, Any]:
    hidden = int(cfg["n_embd"])
    return {"layers": int(cfg["n_layer"]), "hidden": hidden, "heads": int(cfg["n_head"]),
            "ffn_hidden": int(cfg.get("n_inner") or 4 * hidden), "vocab": int(cfg["vocab_size"]),
            "seq_len": int(cfg["n_positions"]), "mlp": "gelu", "tie_embeddings": True}


def _decoder(cfg: dict[str, Any], file: Path, kind: str) -> dict[str, Any]:
    act = str(cfg.get("hidden_act") or cfg.get("hidden_activation") or "silu")
    if act not in GATED:
        raise ProblemError(f"{file}: activation '{act}' of model_type '{kind}' is not a gated MLP the model covers "
                           f"({', '.join(GATED)}). To fix: spell the shape out in the problem file.")
    heads = int(cfg["num_attention_heads"])
    out: dict[str, Any] = {
        "layers": int(cfg["num_hidden_layers"]), "hidden": int(cfg["hidden_size"]), "heads": heads,
        "kv_heads": int(cfg.get("num_key_value_heads") or heads), "ffn_hidden": int(cfg["intermediate_size"]),
        "vocab": int(cfg["vocab_size"]), "seq_len": int(cfg["max_position_embeddings"]), "mlp": "swiglu",
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", kind.startswith("gemma")))}
    if cfg.get("head_dim"):
        out["head_dim"] = int(cfg["head_dim"])
    pattern = cfg.get("sliding_window_pattern")
    if kind.startswith("gemma3") and cfg.get("sliding_window") and pattern:  # every pattern-th layer is global
        out.update(sliding_window=int(cfg["sliding_window"]), sliding_layers=out["layers"] - out["layers"] // pattern)
    return out


def _experts(cfg: dict[str, Any], kind: str) -> dict[str, Any]:
    if kind == "mixtral":
        ffn = int(cfg["intermediate_size"])
        return {"experts": int(cfg["num_local_experts"]), "experts_active": int(cfg["num_experts_per_tok"]),
                "expert_ffn_hidden": ffn}
    if kind in ("qwen2_moe", "qwen3_moe"):
        size = int(cfg["moe_intermediate_size"])
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        return {"experts": int(cfg["num_experts"]), "experts_active": int(cfg["num_experts_per_tok"]),
                "expert_ffn_hidden": size, "shared_experts": round(shared / size),
                "dense_layers": len(cfg.get("mlp_only_layers") or ())}
    if kind.startswith("deepseek"):
        return {"experts": int(cfg["n_routed_experts"]), "experts_active": int(cfg["num_experts_per_tok"]),
                "shared_experts": int(cfg.get("n_shared_experts") or 0),
                "expert_ffn_hidden": int(cfg["moe_intermediate_size"]),
                "dense_layers": int(cfg.get("first_k_dense_replace") or 0),
                "q_lora_rank": int(cfg.get("q_lora_rank") or 0), "kv_lora_rank": int(cfg["kv_lora_rank"]),
                "qk_rope_dim": int(cfg["qk_rope_head_dim"]), "qk_nope_dim": int(cfg["qk_nope_head_dim"]),
                "v_head_dim": int(cfg["v_head_dim"])}
    return {}


def _hybrid(cfg: dict[str, Any], file: Path, kind: str) -> dict[str, Any]:
    """Qwen3-Next and Qwen3.5: ``layer_types`` (or every ``full_attention_interval``-th layer) attends
    in full, the rest are Gated DeltaNet layers; MoE variants route as Qwen3-MoE does."""
    experts = _experts(cfg, "qwen3_moe") if cfg.get("num_experts") else {}
    ffn = cfg.get("intermediate_size") or cfg.get("moe_intermediate_size")
    out = _decoder({**cfg, "intermediate_size": ffn}, file, kind)
    if int(cfg["linear_value_head_dim"]) != int(cfg["linear_key_head_dim"]):
        raise ProblemError(f"{file}: linear_key_head_dim {cfg['linear_key_head_dim']} and linear_value_head_dim "
                           f"{cfg['linear_value_head_dim']} differ; the performance model takes one head size for "
                           "both. To fix: spell the shape out in the problem file.")
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != out["layers"]:
            raise ProblemError(f"{file}: layer_types names {len(types)} layers where num_hidden_layers is "
                               f"{out['layers']}. To fix: use the model's own config.json, or spell the shape out "
                               "in the problem file.")
        linear = sum(1 for t in types if t == "linear_attention")
    else:
        linear = out["layers"] - out["layers"] // int(cfg["full_attention_interval"])
    return {**out, **experts, "linear_layers": linear, "linear_key_heads": int(cfg["linear_num_key_heads"]),
            "linear_value_heads": int(cfg["linear_num_value_heads"]),
            "linear_head_dim": int(cfg["linear_key_head_dim"]),
            "linear_conv_kernel": int(cfg.get("linear_conv_kernel_dim", 4)),
            "attn_output_gate": bool(cfg.get("attn_output_gate", True))}
