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
    """Q and O are h×q_hidden (h×h unless the head size is set apart from hidden/heads); K and V are
    h×kv_hidden (GQA shrinks them). GPT adds biases.

    Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434) compresses Q through a rank
    q_lora_rank and K/V through kv_lora_rank (plus a shared rotary key), each with a norm.
    """
    h = m.hidden
    if m.mla:
        q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * m.heads * m.qk_head_dim if m.q_lora_rank
             else h * m.heads * m.qk_head_dim)
        kv = h * (m.kv_lora_rank + m.qk_rope_dim) + m.kv_lora_rank + m.kv_lora_rank * m.heads * (
            m.qk_nope_dim + m.v_head_dim)
        return q + kv + m.heads * m.v_head_dim * h
    weights = attention_matmul_params(m)
    if m.gpt_block:
        return weights + m.q_hidden + 2 * m.kv_hidden + h
    return weights


def q_projection_width(m: ModelSpec) -> int:
    """Width of a full-attention layer's Q projection: the queries, and as many gate values again
    where the attention output is gated (``attn_output_gate``)."""
    return (2 if m.attn_output_gate else 1) * m.q_hidden


def attention_matmul_params(m: ModelSpec) -> int:
    """The projection weights of a full-attention layer without MLA: Q (with its gate), K, V and O."""
    return m.hidden * (q_projection_width(m) + m.q_hidden + 2 * m.kv_hidden)


def linear_widths(m: ModelSpec) -> tuple[int, int]:
    """Per-token widths of a Gated DeltaNet layer's keys (and queries) and values:
    key heads × head size, value heads × head size."""
    return m.linear_key_heads * m.linear_head_dim, m.linear_value_heads * m.linear_head_dim


def linear_attention_params(m: ModelSpec) -> int:
    """One Gated DeltaNet layer's token mixer (Yang et al. 2024, arXiv 2412.06464; Qwen3-Next's
    ``Qwen3NextGatedDeltaNet``): an input projection to Q, K, V and the output gate Z, one to the
    per-head decay and write strength (a, b), the causal convolution over Q, K and V, the output
    projection, and per value head a decay rate and bias, with the gated norm's weight."""
    key, value = linear_widths(m)
    conv = (2 * key + value) * m.linear_conv_kernel  # the causal convolution over Q, K and V
    return linear_matmul_params(m) + conv + 2 * m.linear_value_heads + m.linear_head_dim


def linear_matmul_params(m: ModelSpec) -> int:
    """The weights of ``linear_attention_params`` a token multiplies by (its projections)."""
    h, (key, value) = m.hidden, linear_widths(m)
    return h * (2 * key + 2 * value) + h * 2 * m.linear_value_heads + value * h


def mixer_params(m: ModelSpec) -> int:
    """All layers' token mixers: softmax attention on the full-attention layers, Gated DeltaNet on
    the linear ones."""
    return (m.layers - m.linear_layers) * attention_params(m) + m.linear_layers * linear_attention_params(m)


def mixer_params_per_layer(m: ModelSpec) -> float:
    """``mixer_params`` of the average layer (``attention_params`` itself without linear layers)."""
    return mixer_params(m) / m.layers


def linear_state_values(m: ModelSpec) -> int:
    """Values of recurrent state one sequence keeps in one Gated DeltaNet layer, whatever its
    length: a head_dim × head_dim matrix per value head, and the convolution's last kernel − 1
    inputs of Q, K and V (vLLM's ``MambaStateShapeCalculator.gated_delta_net_state_shape``)."""
    key, value = linear_widths(m)
    return m.linear_value_heads * m.linear_head_dim ** 2 + (2 * key + value) * (m.linear_conv_kernel - 1)


def linear_attention_flops_per_token(m: ModelSpec) -> float:
    """Forward FLOPs of the gated delta rule for one token in one linear layer, beyond its
    projections: per value head, ``S ← αS(I − β·k·kᵀ) + β·v·kᵀ`` and ``o = S·q`` (Yang et al. 2024,
    eq. 10) read and update a head_dim² state in two matrix-vector products, an outer product and a
    scaling, about 8 FLOPs per state value; the chunked form a prompt is computed in does about as
    many per token."""
    return 8.0 * m.linear_value_heads * m.linear_head_dim ** 2


def mixing_flops_per_token(m: ModelSpec, attended: float, decode: bool = False) -> float:
    """Forward FLOPs of every layer's token mixing for one token: scores and context over
    ``attended`` tokens (``ModelSpec.attended``; at a decode step, as ``decode_attention_flops_per_token_layer``
    counts them), and the linear layers' delta rule (``linear_flops_per_token``)."""
    per_layer = (decode_attention_flops_per_token_layer if decode else attention_flops_per_token_layer)(m, attended)
    return per_layer * m.layers + linear_flops_per_token(m)


def linear_flops_per_token(m: ModelSpec) -> float:
    """``linear_attention_flops_per_token`` over all the linear layers (0 without them)."""
    return linear_attention_flops_per_token(m) * m.linear_layers


def _mlp(m: ModelSpec, width: int) -> int:
    """One MLP: GELU's up and down matrices with biases, squared ReLU's without, or SwiGLU's gate,
    up and down."""
    if m.gpt_block:
        return 2 * m.hidden * width + width + m.hidden
    return m.mlp_matrices * m.hidden * width


def mlp_params(m: ModelSpec) -> int:
    """A dense layer's MLP."""
    return _mlp(m, m.ffn_hidden)


def moe_params(m: ModelSpec, active: bool = False) -> int:
    """An MoE layer's MLPs: the routed experts (all, or the top-k a token uses), the shared
    experts and the router."""
    routed = m.experts_active if active else m.experts
    return (routed + m.shared_experts) * _mlp(m, m.expert_ffn_hidden) + m.hidden * m.experts


def norm_params(m: ModelSpec) -> int:
    """Per layer: two LayerNorms (scale and bias) for GPT, two RMSNorms (scale) for Llama."""
    return 4 * m.hidden if m.gpt_block else 2 * m.hidden


@lru_cache(maxsize=256)  # pure function of a frozen spec; the planner calls it a million times
def layer_params(m: ModelSpec) -> int:
    """Parameters of the average layer (MoE models mix dense and MoE layers)."""
    return round(transformer_params(m) / m.layers)


def transformer_params(m: ModelSpec, active: bool = False) -> int:
    """All layers' parameters (or, for MoE, those one token uses)."""
    dense = m.layers - m.moe_layers
    return (mixer_params(m) + m.layers * norm_params(m) + dense * mlp_params(m)
            + (m.moe_layers * moe_params(m, active) if m.moe else 0))


def expert_params(m: ModelSpec) -> int:
    """Routed experts' parameters: what expert parallelism shards."""
    return m.moe_layers * m.experts * _mlp(m, m.expert_ffn_hidden) if m.moe else 0


def embedding_params(m: ModelSpec) -> int:
    """Input embedding (+ learned positions for GPT); the output layer when untied."""
    params = m.vocab * m.hidden
    if m.gpt_block:
        params += m.seq_len * m.hidden
    if not m.tied_embeddings:
        params += m.vocab * m.hidden
    return params


def final_norm_params(m: ModelSpec) -> int:
    return 2 * m.hidden if m.gpt_block else m.hidden


@lru_cache(maxsize=256)  # pure function of a frozen spec; the planner calls it a million times
def param_count(m: ModelSpec) -> int:
    """Total trainable parameters (for MoE: every expert)."""
    return transformer_params(m) + embedding_params(m) + final_norm_params(m)


def active_param_count(m: ModelSpec) -> int:
    """Parameters one token passes through (equal to ``param_count`` for a dense model)."""
    return transformer_params(m, active=True) + embedding_params(m) + final_norm_params(m)


@lru_cache(maxsize=256)  # pure function of a frozen spec; the planner calls it a million times
def matmul_params_per_layer(m: ModelSpec) -> int:
    """Weights a token multiplies by in the average layer (biases and norms excluded; for MoE
    only the experts it is routed to)."""
    # MLA's weights but the two latent norms'
    attn = attention_params(m) - m.q_lora_rank - m.kv_lora_rank if m.mla else attention_matmul_params(m)
    width = m.mlp_matrices
    dense_mlp = width * m.hidden * m.ffn_hidden
    moe_mlp = ((m.experts_active + m.shared_experts) * width * m.hidden * m.expert_ffn_hidden
               + m.hidden * m.experts) if m.moe else 0
    mixers = (m.layers - m.linear_layers) * attn + m.linear_layers * linear_matmul_params(m)
    total = mixers + (m.layers - m.moe_layers) * dense_mlp + m.moe_layers * moe_mlp
    return round(total / m.layers)


def gemm_shapes(m: ModelSpec, tp: int, ep: int, rows: float) -> list[tuple[float, float]]:
    """(forward FLOPs per token, narrowest side) of each GEMM of the average layer on one GPU, for
    ``rows`` tokens multiplied at once.

    A GEMM's efficiency falls as its narrowest side (rows of tokens, or the weight's split width)
    shrinks below the tile sizes a GPU needs to fill its units (wave and tile quantisation, NVIDIA's
    Matrix Multiplication Background guide): tensor parallelism thins every GEMM, and an MoE expert
    sees only ``rows·k·ep/E`` of the tokens (its share, gathered over expert parallelism).
    """
    h = m.hidden
    qkv = q_projection_width(m) + 2 * m.kv_hidden
    full = full_attention_share(m)
    out = [(full * 2.0 * h * qkv / tp, min(h, qkv / tp, rows)),
           (full * 2.0 * h * m.q_hidden / tp, min(h, m.q_hidden / tp, rows))]
    if m.linear_layers:
        linear, (key, value) = m.linear_layers / m.layers, linear_widths(m)
        projected = 2 * key + 2 * value + 2 * m.linear_value_heads
        out += [(linear * 2.0 * h * projected / tp, min(h, projected / tp, rows)),
                (linear * 2.0 * h * value / tp, min(h, value / tp, rows))]
    mats = m.mlp_matrices
    dense = (m.layers - m.moe_layers) / m.layers
    if dense:
        out.append((dense * 2.0 * mats * h * m.ffn_hidden / tp, min(h, m.ffn_hidden / tp, rows)))
    if m.moe:
        share = m.moe_layers / m.layers
        expert = m.expert_ffn_hidden / tp
        out.append((share * 2.0 * mats * h * m.expert_ffn_hidden * m.experts_active / tp,
                    min(h, expert, rows * m.experts_active * ep / m.experts)))
        if m.shared_experts:
            out.append((share * 2.0 * mats * h * m.expert_ffn_hidden * m.shared_experts / tp, min(h, expert, rows)))
    return out


def attention_widths(m: ModelSpec) -> tuple[int, int, int, int]:
    """Per-token widths of Q, K, V and the attention output (before its projection) a layer
    computes: heads × head size for Q and the output (not the hidden size where the head size is set
    apart, as in Qwen3 and gpt-oss), kv_heads × head size for K and V (GQA); multi-head latent
    attention decompresses K and V per head, at its QK and V head dims (DeepSeek-V2, section 2.1.2)."""
    q, out = m.heads * m.qk_head_dim, m.heads * m.attn_v_dim
    if m.mla:
        return q, q, out, out
    return q, m.kv_hidden, m.kv_hidden, out


# FLA's chunked gated delta rule (``chunk_gated_delta_rule``, which training runs) works in chunks of this many tokens
LINEAR_CHUNK = 64


def linear_activation_width(m: ModelSpec) -> int:
    """Values per token one Gated DeltaNet layer keeps for its backward pass, all split by TP (as
    ``attention_widths`` are softmax attention's): the causal convolution's input over Q, K and V
    (causal-conv1d saves it, its SiLU fused); the Q and K, repeated to the value heads as
    transformers' ``Qwen3NextGatedDeltaNet`` hands them to the kernel, and the V that FLA's
    ``chunk_gated_delta_rule`` saves, with its chunk-local WY matrix A (``LINEAR_CHUNK`` values per
    value head; the chunk states it recomputes in the backward pass instead of keeping them); about
    ten more per value head for the decay and write strength, their inputs and the Q and K norms'
    statistics, some in fp32; the gated norm's input and gate; the output projection's input."""
    key, value = linear_widths(m)
    convolved = 2 * key + value
    kernel = 2 * m.linear_value_heads * m.linear_head_dim + value  # Q and K at the value heads, V
    gated_output = 3 * value  # the norm's input and gate, the output projection's input
    return convolved + kernel + gated_output + (LINEAR_CHUNK + 10) * m.linear_value_heads


def full_attention_share(m: ModelSpec) -> float:
    """Share of the layers whose mixer is softmax attention (scores over the context): 1 without linear layers."""
    return (m.layers - m.linear_layers) / m.layers


def mixer_activation_width(m: ModelSpec) -> float:
    """Values per token the average layer's token mixer keeps for its backward pass: a full-attention
    layer's Q, K, V and output (``attention_widths``), with an output gate also the gate and the output
    it gates; a linear layer's ``linear_activation_width``. Without either, ``sum(attention_widths(m))``."""
    full = sum(attention_widths(m)) + (2 * m.heads * m.attn_v_dim if m.attn_output_gate else 0)
    if not m.linear_layers:
        return float(full)
    share = full_attention_share(m)
    return share * full + (1.0 - share) * linear_activation_width(m)


def kv_width(m: ModelSpec) -> int:
    """Per-token width of the K and V a layer computes together (``attention_widths``): what a
    context-parallel ring passes on."""
    _, k, v, _ = attention_widths(m)
    return k + v


def latent_width(m: ModelSpec) -> int:
    """Per-token width of multi-head latent attention's compressed vectors (the query's and the
    key-value latent with its rotary key; 0 for other attention)."""
    return (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_dim) if m.mla else 0


def attention_flops_per_token_layer(m: ModelSpec, seq_len: float) -> float:
    """Forward FLOPs of scores and context for one token in one layer: 2·s·heads·(qk + v dims),
    i.e. 4·s·h for standard attention (no causal saving, as Narayanan et al. count)."""
    return 2.0 * seq_len * m.heads * (m.qk_head_dim + m.attn_v_dim)


def decode_attention_flops_per_token_layer(m: ModelSpec, seq_len: float) -> float:
    """``attention_flops_per_token_layer`` for a decode step. Multi-head latent attention decodes
    with the up-projections absorbed into the query and the output (DeepSeek-V2, arXiv 2405.04434,
    section 2.1.3): each head attends over the cached latent itself, as multi-query attention with
    QK dims kv_lora_rank + rope and V dims kv_lora_rank (576 and 512 for DeepSeek-V3, against the
    192 and 128 of prefill's decompressed heads: vLLM's MLA backends, FlashMLA, SGLang and
    TensorRT-LLM all decode so), 3.4 times the FLOPs over the same context."""
    if not m.mla:
        return attention_flops_per_token_layer(m, seq_len)
    return 2.0 * seq_len * m.heads * (2 * m.kv_lora_rank + m.qk_rope_dim)


@lru_cache(maxsize=256)  # pure function of a frozen spec; the planner calls it a million times
def model_flops_per_token(m: ModelSpec, seq_len: int | None = None) -> float:
    """Training FLOPs per token (forward + backward = 3 × forward), no recomputation.

    6·(matmul params of all layers) + attention scores and context 12·s·h·L
    + the LM head 6·V·h. For a GPT shape this is Narayanan et al. eq. 3 divided by B·s. Layers with
    a sliding window attend to at most its length (``ModelSpec.attended``): the model itself never
    computes the rest, so MFU does not count it (Gemma 3, gpt-oss, Llama 4); linear-attention layers
    count their gated delta rule instead (``linear_flops_per_token``).
    """
    s = seq_len or m.seq_len
    return (
        6.0 * matmul_params_per_layer(m) * m.layers
        + 3.0 * mixing_flops_per_token(m, m.attended(s))
        + 6.0 * m.vocab * m.hidden
    )


@lru_cache(maxsize=256)  # pure function of a frozen spec; the planner calls it a million times
def hardware_flops_per_token(m: ModelSpec, recompute: str, seq_len: int | None = None) -> float:
    """FLOPs the GPU executes per token, recomputation included (what HFU counts).

    Full recompute repeats each layer's forward (+2·matmul params, +4·s·h per layer, a linear
    layer's delta rule too); selective recompute repeats only the attention scores and context
    (+4·s·h per layer), as in Korthikanti et al. 2022 (arXiv 2205.05198) section 5.
    """
    s = seq_len or m.seq_len
    flops = model_flops_per_token(m, s)
    attention = attention_flops_per_token_layer(m, m.attended(s)) * m.layers
    if recompute == "full":
        flops += 2.0 * matmul_params_per_layer(m) * m.layers + mixing_flops_per_token(m, m.attended(s))
    elif recompute == "selective":
        flops += attention
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


def prefill_matmul_params(m: ModelSpec, s: float) -> float:
    """Weights a prompt of ``s`` tokens multiplies by, summed over its tokens: every layer for each, the
    LM head for the last alone, whose logits are sampled (vLLM's and SGLang's ``LogitsProcessor`` on the
    selected positions; TensorRT-LLM without ``gather_context_logits``)."""
    return matmul_params_per_layer(m) * m.layers * s + m.vocab * m.hidden
