"""Training memory per GPU: weights, gradients, optimizer state, activations.

Mixed precision with Adam: 2 B/param of 16-bit weights, 2 B/param of gradients, 12 B/param of
fp32 master weights, momentum and variance (EleutherAI "Transformer Math 101"). ZeRO stage 1
shards the optimizer over DP, stage 2 also the gradients, stage 3 also the weights
(Rajbhandari et al. 2020). Activations follow Korthikanti et al. 2022 (arXiv 2205.05198),
generalised from GPT's 4h MLP and full multi-head attention to any MLP width and to GQA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from optimizer.perf import model as shape
from optimizer.perf.specs import ModelSpec, TrainPlan

WEIGHT_BYTES = 2
GRAD_BYTES = 2
ADAM_BYTES = 12
ACT_BYTES = 2  # 16-bit activations


@dataclass(frozen=True)
class MemoryResult:
    """Bytes per GPU on the fullest pipeline stage, with its breakdown."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    reserved: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.reserved

    def breakdown(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "reserved": self.reserved,
        }


def activation_bytes_per_layer(
    m: ModelSpec, seq_len: float, micro_batch: int, tp: int, recompute: str, sequence_parallel: bool,
    flash_attention: bool = False,
) -> float:
    """Activation bytes one layer keeps for the backward pass, per GPU.

    Korthikanti et al. Table 2 for a GPT layer: ``s·b·h·(34 + 5·a·s/h)`` without recompute
    and without parallelism. The 34 splits into 10·s·b·h that TP does not shard (LayerNorm
    inputs 4, QKV and MLP inputs 2 + 2, dropout masks 2) and 24·s·b·h that it does (Q, K, V,
    attention-output input, and the MLP's 16). Here Q, K, V and the attention output take their own
    widths (``model.attention_widths``: GQA's K and V, a head size set apart from hidden/heads, MLA's
    decompressed heads, whose compressed latents are kept too, unsharded; a hybrid model's Gated
    DeltaNet layers keep their own, ``model.mixer_activation_width``, and no scores) and the MLP its own width:
    GELU keeps 4·s·b·f, SwiGLU 6·s·b·f. Selective recompute drops the
    5·a·s²·b attention term; full recompute keeps only the layer input, 2·s·b·h.
    Sequence parallelism shards the 10·s·b·h part over TP as well. FlashAttention (Dao et al.
    2022) never stores the scores either, so without recompute it keeps what selective does.
    """
    s, b, h, a = seq_len, micro_batch, m.hidden, m.heads
    if recompute == "full":
        per = 2.0 * s * b * h
        return per / tp if sequence_parallel else per
    unsharded = 10.0 * s * b * h + 2.0 * s * b * shape.latent_width(m)
    mlp = (6.0 if m.mlp == "swiglu" else 4.0) * s * b * mlp_activation_width(m)
    sharded = 2.0 * s * b * shape.mixer_activation_width(m) + mlp
    if recompute == "none" and not flash_attention:
        sharded += 5.0 * a * s * s * b * shape.full_attention_share(m)
    if sequence_parallel:
        unsharded /= tp
    return unsharded + sharded / tp


def mlp_activation_width(m: ModelSpec) -> float:
    """The MLP width a token's activations span, averaged over layers: a dense layer's ffn, or in
    an MoE layer the k routed plus the shared experts it passes through."""
    if not m.moe:
        return m.ffn_hidden
    moe = (m.experts_active + m.shared_experts) * m.expert_ffn_hidden
    return ((m.layers - m.moe_layers) * m.ffn_hidden + m.moe_layers * moe) / m.layers


def stage_layers(m: ModelSpec, pp: int) -> int:
    """Layers on the fullest stage."""
    return math.ceil(m.layers / pp)


def training_memory(m: ModelSpec, plan: TrainPlan, reserved: float = 0.0) -> MemoryResult:
    """Memory per GPU of the fullest pipeline stage (the first, under 1F1B).

    Parameters on a stage are its layers plus the embedding (first stage) or the output
    layer and final norm (last stage); with one stage, all of them. The first stage keeps
    ``min(pp, m)`` micro-batches of activations in flight (1F1B, Narayanan et al. 2021), and
    ``1 + (pp−1)/(pp·v)`` times that with ``v`` interleaved model chunks per GPU;
    the last stage also holds the fp32 logits for the loss (4·s·b·V/tp bytes).
    """
    s = (plan.seq_len or m.seq_len) / plan.cp  # context parallelism: each GPU keeps s/cp tokens
    tp, pp, dp = plan.tp, plan.pp, plan.grad_ranks  # ZeRO shards over DP × CP
    layers = stage_layers(m, pp)
    per_layer = shape.layer_params(m)
    embed_in = m.vocab * m.hidden + (m.seq_len * m.hidden if m.gpt_block else 0)
    embed_out = 0 if m.tied_embeddings else m.vocab * m.hidden
    logits = 4.0 * s * plan.micro_batch * m.vocab / tp
    act_layer = activation_bytes_per_layer(m, s, plan.micro_batch, tp, plan.recompute, plan.sequence_parallel,
                                           plan.flash_attention)
    in_flight: float = min(pp, plan.num_micro_batches)
    if plan.virtual_stages > 1 and pp > 1:  # interleaved 1F1B (Korthikanti et al. 2022, section 4.2.3)
        in_flight *= 1.0 + (pp - 1) / (pp * plan.virtual_stages)
    if pp == 1:
        stages = [(shape.param_count(m), act_layer * layers + logits)]
    else:
        first = (layers * per_layer + embed_in, act_layer * layers * in_flight)
        last = (
            layers * per_layer + embed_out + shape.final_norm_params(m),
            act_layer * layers + logits,
        )
        stages = [first, last]
    best: MemoryResult | None = None
    # expert parallelism shards each stage's routed experts over ep GPUs; ZeRO shards their state
    # over the expert-data-parallel group (dp/ep ranks hold the same experts), the dense part's over dp
    experts = shape.expert_params(m) / m.layers * layers if m.moe else 0.0  # the same on every stage
    routed, edp = experts / plan.ep / tp, max(dp / plan.ep, 1.0)
    for params, acts in stages:
        dense = (params - experts) / tp
        # each state, sharded by ZeRO from its stage on (3: weights, 2: gradients, 1: optimizer)
        weights, grads, optim = (nbytes * dense / (dp if plan.zero >= z else 1)
                                 + nbytes * routed / (edp if plan.zero >= z else 1)
                                 for nbytes, z in ((WEIGHT_BYTES, 3), (GRAD_BYTES, 2), (ADAM_BYTES, 1)))
        result = MemoryResult(weights, grads, optim, acts, reserved)
        if best is None or result.total > best.total:
            best = result
    assert best is not None
    return best
