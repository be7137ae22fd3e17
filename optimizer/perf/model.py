"""Parameter counts and FLOPs of a decoder-only transformer.

Parameter count is exact for the two block types in ``ModelSpec`` (checked against published
counts in the tests). FLOPs follow Narayanan et al. 2021 (arXiv 2104.04473, eq. 3):
``72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h))`` per step for GPT, generalised to any MLP width and
to grouped-query attention by counting the matmul parameters of a layer.
"""

from __future__ import annotations

from functools import lru_cache

from optimizer.perf.specs import ModelSpec


def attention_params(m: ModelSpec) -> int:
    """Q and O are h×h; K and V are h×kv_hidden (GQA shrinks them). GPT adds biases."""
    weights = 2 * m.hidden * m.hidden + 2 * m.hidden * m.kv_hidden
    if m.mlp == "gelu":
        return weights + m.hidden + 2 * m.kv_hidden + m.hidden
    return weights


def mlp_params(m: ModelSpec) -> int:
    """GELU: up and down matrices with biases; SwiGLU: gate, up and down, no biases."""
    if m.mlp == "gelu":
        return 2 * m.hidden * m.ffn_hidden + m.ffn_hidden + m.hidden
    return 3 * m.hidden * m.ffn_hidden


def norm_params(m: ModelSpec) -> int:
    """Per layer: two LayerNorms (scale and bias) for GPT, two RMSNorms (scale) for Llama."""
    return 4 * m.hidden if m.mlp == "gelu" else 2 * m.hidden


@lru_cache(maxsize=256)  # pure function of a frozen spec; the planner calls it a million times
def layer_params(m: ModelSpec) -> int:
    return attention_params(m) + mlp_params(m) + norm_params(m)


def embedding_params(m: ModelSpec) -> int:
    """Input embedding (+ learned positions for GPT); the output layer when untied."""
    params = m.vocab * m.hidden
    if m.mlp == "gelu":
        params += m.seq_len * m.hidden
    if not m.tied_embeddings:
        params += m.vocab * m.hidden
    return params


def final_norm_params(m: ModelSpec) -> int:
    return 2 * m.hidden if m.mlp == "gelu" else m.hidden


@lru_cache(maxsize=256)  # pure function of a frozen spec; the planner calls it a million times
def param_count(m: ModelSpec) -> int:
    """Total trainable parameters."""
    return m.layers * layer_params(m) + embedding_params(m) + final_norm_params(m)


@lru_cache(maxsize=256)  # pure function of a frozen spec; the planner calls it a million times
def matmul_params_per_layer(m: ModelSpec) -> int:
    """Weights that take part in matrix multiplies (biases and norms excluded)."""
    attn = 2 * m.hidden * m.hidden + 2 * m.hidden * m.kv_hidden
    mlp = (2 if m.mlp == "gelu" else 3) * m.hidden * m.ffn_hidden
    return attn + mlp


def model_flops_per_token(m: ModelSpec, seq_len: int | None = None) -> float:
    """Training FLOPs per token (forward + backward = 3 × forward), no recomputation.

    6·(matmul params of all layers) + attention scores and context 12·s·h·L
    + the LM head 6·V·h. For a GPT shape this is Narayanan et al. eq. 3 divided by B·s.
    """
    s = seq_len or m.seq_len
    return (
        6.0 * matmul_params_per_layer(m) * m.layers
        + 12.0 * s * m.hidden * m.layers
        + 6.0 * m.vocab * m.hidden
    )


def hardware_flops_per_token(m: ModelSpec, recompute: str, seq_len: int | None = None) -> float:
    """FLOPs the GPU executes per token, recomputation included (what HFU counts).

    Full recompute repeats each layer's forward (+2·matmul params, +4·s·h per layer);
    selective recompute repeats only the attention scores and context (+4·s·h per layer),
    as in Korthikanti et al. 2022 (arXiv 2205.05198) section 5.
    """
    s = seq_len or m.seq_len
    flops = model_flops_per_token(m, s)
    if recompute == "full":
        flops += 2.0 * matmul_params_per_layer(m) * m.layers + 4.0 * s * m.hidden * m.layers
    elif recompute == "selective":
        flops += 4.0 * s * m.hidden * m.layers
    return flops


def training_flops(params: float, tokens: float) -> float:
    """The 6·N·D rule (Kaplan et al. 2020): total training FLOPs."""
    return 6.0 * params * tokens


def gpu_hours(flops: float, achieved_flops_per_gpu: float) -> float:
    """GPU-hours to execute ``flops`` at a sustained rate per GPU."""
    return flops / achieved_flops_per_gpu / 3600.0


def tp_bound(hidden: int, peak_flops: float, link_bw_one_way: float, bytes_per_value: int = 2) -> float:
    """Largest TP degree before the link, not the math, sets the pace.

    Per TP rank a layer does about 6·(h/t)/bytes FLOP per byte it sends (seed
    003_822282aa4321783a); the link keeps up while that ratio ≥ peak / bandwidth, so
    ``t ≤ 6·h·bw / (bytes·peak)``.
    """
    return 6.0 * hidden * link_bw_one_way / (bytes_per_value * peak_flops)
