"""Frozen inputs of the performance model: the model shape, the hardware, the parallel plan of a
training run (``TrainPlan``) and of a serving replica (``ServePlan``, with its weight formats).

Everything inside is SI: bytes, FLOP, seconds, bytes per second. Catalog units (GB, GB/s,
TFLOPS) are converted once, in ``optimizer.catalog``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, TypeVar, get_args

import numpy as np

Recompute = Literal["none", "selective", "full"]  # activation recomputation (Korthikanti et al. 2022)
Precision = Literal["bf16", "fp16", "fp8", "fp4"]  # the tensor-core math a training plan runs in
RECOMPUTE_MODES: tuple[Recompute, ...] = get_args(Recompute)
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
R = TypeVar("R")


def evolve(record: R, **changes: object) -> R:
    """``dataclasses.replace`` for the hot path of plan enumeration (hundreds of thousands of plans
    and terms): a copy with ``changes``, without re-running ``__init__``. Only for frozen records
    with no ``__post_init__`` (TrainPlan, TrainTerms): nothing is validated or derived on the way."""
    new = object.__new__(type(record))
    new.__dict__.update(record.__dict__)
    new.__dict__.update(changes)
    return new


def as_precision(text: str) -> Precision:
    """``text`` as a training precision; ValueError naming the choices if it is none."""
    for precision in PRECISIONS:
        if precision == text:
            return precision
    raise ValueError(f"unknown training precision {text!r}: one of {', '.join(PRECISIONS)}")


def as_recompute(text: str) -> Recompute:
    """``text`` as a recomputation mode; ValueError naming the choices if it is none."""
    for mode in RECOMPUTE_MODES:
        if mode == text:
            return mode
    raise ValueError(f"unknown recomputation {text!r}: one of {', '.join(RECOMPUTE_MODES)}")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape.

    ``mlp='gelu'`` is the classic GPT block (two matrices, biases, LayerNorm, learned
    positions, tied embeddings); ``mlp='swiglu'`` is the Llama block (three matrices, no
    biases, RMSNorm, rotary positions, untied output layer); ``mlp='relu2'`` is the Llama block
    with a two-matrix squared-ReLU MLP (Nemotron-4, Parmar et al. 2024, arXiv 2402.16819).
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int  # the dense MLP's width (dense layers of an MoE model use it too)
    vocab: int
    seq_len: int
    mlp: str = "swiglu"
    # mixture of experts (Shazeer et al. 2017; Mixtral, DeepSeek-V3): 0 experts = dense
    experts: int = 0  # routed experts per MoE layer
    experts_active: int = 0  # top-k routed experts per token
    shared_experts: int = 0  # experts every token passes through (DeepSeek)
    expert_ffn_hidden: int = 0  # one expert's MLP width
    dense_layers: int = 0  # leading layers with a dense MLP
    # multi-head latent attention (DeepSeek-V2/V3): used when kv_lora_rank > 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    v_head_dim: int = 0
    # shapes of 2024-2026 configs: a head size that is not hidden/heads (Qwen3-32B: 64 × 128 over a
    # hidden of 5,120; gpt-oss: 64 × 64 over 2,880), tied input/output embeddings (small Qwen, Gemma)
    # and layers that attend only to a sliding window of recent tokens (Mistral, gpt-oss, Gemma 3)
    attn_head_dim: int = 0  # 0: hidden // heads
    tie_embeddings: bool | None = None  # None: tied for GPT (gelu) blocks, untied for Llama (swiglu)
    sliding_window: int = 0  # tokens a windowed layer attends to (0: no windowed layers)
    sliding_layers: int = 0  # how many of the layers are windowed
    # hybrid linear attention (Qwen3-Next, Qwen3.5): ``linear_layers`` of the layers mix tokens with
    # Gated DeltaNet (Yang et al. 2024, arXiv 2412.06464) instead of softmax attention, keeping a fixed
    # recurrent state per sequence instead of a KV cache; the others attend in full, their Q projection
    # also computing a sigmoid gate on the attention output where ``attn_output_gate``
    linear_layers: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_head_dim: int = 0  # key and value head size (128 in every Qwen3-Next and Qwen3.5 config)
    linear_conv_kernel: int = 4  # the short causal convolution's width (``linear_conv_kernel_dim``)
    attn_output_gate: bool = False

    @property
    def gpt_block(self) -> bool:
        """GPT-2/3 block: biases, LayerNorm with bias, learned positions."""
        return self.mlp == "gelu"

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of one MLP: up and down, plus a gate for SwiGLU."""
        return 3 if self.mlp == "swiglu" else 2

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_dim + self.qk_rope_dim if self.mla else self.head_dim

    @property
    def attn_v_dim(self) -> int:
        return self.v_head_dim if self.mla else self.head_dim

    @property
    def head_dim(self) -> int:
        return self.attn_head_dim or self.hidden // self.heads

    @property
    def q_hidden(self) -> int:
        """Width of Q (and of the attention output before its projection): heads × head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_hidden(self) -> int:
        """Width of K (or V): kv_heads × head_dim; smaller than hidden under GQA."""
        return self.kv_heads * self.head_dim

    @property
    def tied_embeddings(self) -> bool:
        return self.gpt_block if self.tie_embeddings is None else self.tie_embeddings

    def attended(self, context: float) -> float:
        """Tokens a query attends to, averaged over layers, at a context of ``context`` tokens: windowed
        layers see at most ``sliding_window`` of them (Beltagy et al. 2020; Mistral 7B, gpt-oss, Gemma 3).
        Linear-attention layers attend to no cached token (their state is ``model.linear_state_values``)."""
        full = self.layers - self.sliding_layers - self.linear_layers
        if not self.sliding_layers or not self.sliding_window:
            return context * full / self.layers if self.linear_layers else context
        local = min(context, self.sliding_window)
        return (self.sliding_layers * local + full * context) / self.layers


@dataclass(frozen=True)
class Link:
    """A communication path as one GPU sees it: bandwidth each way, efficiency, latency."""

    name: str
    bw_one_way: float  # bytes/s at line rate, per GPU (or per node for a NIC bundle)
    efficiency: float  # achieved fraction of line rate in collectives
    latency: float  # seconds per collective step

    @property
    def effective_bw(self) -> float:
        return self.bw_one_way * self.efficiency


@dataclass(frozen=True)
class Device:
    """One accelerator as the performance model needs it."""

    name: str
    memory: float  # bytes
    mem_bw: float  # bytes/s
    peak_flops: tuple[tuple[str, float], ...]  # (precision, dense FLOP/s)
    # (precision, share of the peak a GEMM reaches: measured MAMF / theory); 1 where not given
    achievable: tuple[tuple[str, float], ...] = ()

    def achievable_share(self, precision: str) -> float:
        """The share of ``precision``'s peak a well-shaped GEMM reaches on this part (FP4 takes FP8's
        measurement, any other precision BF16's, where there is none of its own)."""
        shares = dict(self.achievable)
        fallback = ("fp8", "bf16") if precision == "fp4" else ("bf16",)
        return next((shares[p] for p in (precision, *fallback) if p in shares), 1.0)

    def peak(self, precision: str) -> float | None:
        return dict(self.peak_flops).get(precision)

    def peak_of(self, *precisions: str) -> float:
        """Dense FLOP/s of the first of ``precisions`` the GPU has tensor cores for."""
        for precision in precisions:
            if found := self.peak(precision):
                return found
        raise ValueError(f"{self.name} has no {' or '.join(precisions)} tensor cores")


@dataclass(frozen=True)
class Hardware:
    """A GPU in its server and cluster: the links each parallel dimension may use."""

    device: Device
    gpus_per_node: int
    link: Link  # the intra-node GPU link (NVLink, xGMI, or the PCIe bus)
    link_domain: int  # how many GPUs the link joins (8 for NVSwitch, 2 for a bridge)
    host_bus: Link  # PCIe, used beyond the link domain
    network: Link | None = None  # a node's NICs together (bw per node each way)
    # the link is a full mesh of point-to-point links, its bandwidth spread over the other GPUs of the
    # domain (AMD Infinity Fabric: 7 xGMI links, "a single peer pair gets only 64 GB/s each way";
    # Gaudi's on-die RoCE: 3 of 21 ports to each peer): a group of n GPUs uses n − 1 of those links
    mesh: bool = False

    @property
    def mesh_peers(self) -> int:
        """The other GPUs each GPU has links to: the rest of its link domain within its server."""
        return max(min(self.link_domain, self.gpus_per_node) - 1, 1)

    def mesh_share(self, size: float | np.ndarray) -> float | np.ndarray:
        """The share of the link's bandwidth a collective among ``size`` GPUs of its domain drives:
        (size − 1) / peers on a mesh (at least one link's), all of it through a switch (NVSwitch)."""
        if not self.mesh:
            return 1.0
        peers = self.mesh_peers
        if isinstance(size, np.ndarray):
            return np.clip((size - 1.0) / peers, 1.0 / peers, 1.0)
        return min(max(size - 1.0, 1.0) / peers, 1.0)

    def group_link(self, size: int, ranks: int | None = None) -> Link:
        """The link a collective among ``size`` GPUs of one node runs over; on a mesh, what each GPU
        drives to the ``ranks`` of them it exchanges with (all ``size`` by default: 2 for a
        point-to-point send or a ring's neighbour, the k DP ranks spread over a node between TP ranks)."""
        if size > self.link_domain:
            return self.host_bus
        if not self.mesh:
            return self.link
        return replace(self.link, bw_one_way=self.link.bw_one_way * float(self.mesh_share(float(ranks or size))))

    def oversubscribed(self, factor: float) -> Hardware:
        """The cluster on a fabric whose leaves have ``factor`` times more downlinks than uplinks:
        traffic between leaves shares the uplinks, so a collective spanning leaves gets at most
        1/factor of each node's line rate (a bound: rings that stay within a leaf do better)."""
        if self.network is None or factor <= 1.0:
            return self
        return replace(self, network=replace(self.network, bw_one_way=self.network.bw_one_way / factor))


@dataclass(frozen=True)
class TrainPlan:
    """How one training job is laid out (axis order DP × PP × TP, as in picotron)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    num_micro_batches: int = 1  # per step and per data-parallel replica
    recompute: Recompute = "selective"
    sequence_parallel: bool = False
    zero: int = 1
    precision: Precision = "bf16"
    seq_len: int | None = None  # None: the model's own
    flash_attention: bool = True  # fused attention never stores the s×s scores (Dao et al. 2022)
    ep: int = 1  # expert parallelism: experts sharded over ep GPUs of the data-parallel group
    cp: int = 1  # context parallelism: each sequence split over cp GPUs (ring attention)
    virtual_stages: int = 1  # model chunks per GPU: interleaved 1F1B when > 1 (Narayanan et al. 2021)
    grad_reduce_bytes: int = 4  # bytes per gradient value in the data-parallel reduction (fp32 by
    # default in Megatron-LM and PyTorch FSDP's mixed precision; 2 where a stack reduces in bf16)

    @property
    def gpus(self) -> int:
        return self.replica_gpus * self.dp

    @property
    def replica_gpus(self) -> int:
        """GPUs of one data-parallel replica: TP × PP × CP."""
        return self.tp * self.pp * self.cp

    @property
    def unit_gpus(self) -> int:
        """GPUs the planner scales by: one replica, or an expert-parallel group of ep replicas."""
        return self.replica_gpus * self.ep

    @property
    def grad_ranks(self) -> int:
        """Ranks holding the same weights, which reduce gradients together: DP × CP."""
        return self.dp * self.cp

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step."""
        return self.dp * self.micro_batch * self.num_micro_batches

    def describe(self) -> str:
        sp = "+sp" if self.sequence_parallel else ""
        vp = f"(v{self.virtual_stages})" if self.virtual_stages > 1 else ""
        cp = f"×cp{self.cp}" if self.cp > 1 else ""
        ep = f" ep{self.ep}" if self.ep > 1 else ""
        return (
            f"dp{self.dp}×pp{self.pp}{vp}{cp}×tp{self.tp}{sp}{ep} mb{self.micro_batch}×{self.num_micro_batches}"
            f" {self.recompute}-recompute zero{self.zero} {self.precision}"
        )


# Weight formats: bytes per weight, and the tensor-core precision its GEMMs run in where the GPU
# has tensor cores for the weights' own type (otherwise weight-only: dequantised into 16-bit math,
# as Marlin/AWQ/GGUF kernels and Triton's matmul_ogs do). Block-scaled formats carry their scales:
# NVFP4 one FP8 scale per 16 values (4.5 bits), OCP MXFP4 one E8M0 scale per 32 (4.25 bits; OCP
# Microscaling spec v1.0), GGUF Q4_K_M about 4.85 bits (llama.cpp's quantize table), AWQ/GPTQ
# 4-bit with group-128 scales and zeros ~4.25 bits. NVFP4 checkpoints (ModelOpt) quantise the
# activations too and multiply FP4 by FP4; gpt-oss's MXFP4 experts multiply MXFP8 activations on
# GPUs with FP4 tensor cores (Blackwell's mixed f8f6f4 MMA, at the FP8 rate) and BF16 ones on
# Hopper and older (TensorRT-LLM examples/models/core/gpt_oss/README.md, "MoE Support Matrix":
# Hopper bf16 x mxfp4, Blackwell mxfp8 x mxfp4). "mxfp4" is that scheme on every GPU; a checkpoint
# that quantises its activations to MXFP4 too (AMD Quark's W4A4 on MI355X) would run at the FP4
# rate and is not told apart yet.
FORMATS: dict[str, tuple[float, str]] = {
    "fp16": (2.0, "fp16"), "bf16": (2.0, "bf16"), "fp8": (1.0, "fp8"), "int8": (1.0, "fp16"),
    "int4": (0.5, "fp16"), "awq-int4": (4.25 / 8, "fp16"), "gguf-q4km": (4.85 / 8, "fp16"),
    "nvfp4": (4.5 / 8, "fp4"), "mxfp4": (4.25 / 8, "fp8"),
}
# the tensor cores a format's own weight type needs where that is not its math precision
WEIGHT_MATH = {"mxfp4": "fp4"}
BYTES = {name: nbytes for name, (nbytes, _) in FORMATS.items()}
SERVE_PRECISIONS = tuple(FORMATS)
KV_PRECISIONS = ("fp16", "bf16", "fp8")
ACT_BYTES = 2.0  # 16-bit activations


@dataclass(frozen=True)
class ServePlan:
    """One replica type: its split, number formats, request shape, batch and engine traits."""

    tp: int = 1
    pp: int = 1
    precision: str = "fp16"  # weight format (FORMATS)
    kv_precision: str = "fp16"
    input_len: int = 512
    output_len: int = 256
    batch: int | None = None  # sequences in flight per replica; None: the most that fit (maximum load)
    batching: str = "continuous"  # or "static": prefill the whole batch, then decode it
    requests: int = 0  # a burst of this many requests arriving at once (0: a steady stream)
    variable_lengths: bool = False  # the lengths are a dataset's means (ShareGPT), not every request's
    max_output_len: int = 0  # where lengths vary, the most a request may generate (max_tokens); 0: no limit
    # requests come through the engine's server (HTTP API, each sequence's new token detokenised and
    # streamed every step); False: an offline batch handed to the engine directly (vLLM's
    # LLM.generate, trtllm-bench, an engine's own benchmark script)
    online: bool = True
    memory_fraction: float = 1.0  # share of the GPU's memory the engine takes (vLLM's gpu_memory_utilization)
    kv_fraction: float = 0.9  # share of what is left after weights for the KV cache (TensorRT-LLM: 0.9)
    max_seqs: int = 0  # the engine's cap on sequences in flight (vLLM's max_num_seqs); 0: none
    reserved_memory: float = 2e9  # bytes per GPU: CUDA context, workspace, allocator slack
    fp16_accumulate: bool = False  # 16-bit GEMMs accumulate in FP16 (GeForce: twice the FP32-accumulate rate)
    prefill_ubatch: int = 0  # tokens per micro-batch a prompt is split into and pipelined over the stages (0: whole)
    prefill_dequant: bool = False  # prompt GEMMs of weight-only formats first dequantise into a 16-bit copy
    # the engine takes KV blocks as a sequence grows (vLLM admits a request when its prompt's blocks
    # are free) instead of reserving its whole length at admission (TensorRT-LLM's default
    # GUARANTEED_NO_EVICT, TGI's token budget): a full batch then holds sequences of every age
    kv_on_demand: bool = False
    # decode attention runs vLLM's generic PagedAttention kernels, which switch to V1 (no split of a
    # sequence's context) once sequences x query heads pass 512 (``serve_memory.unshared_kv_factor``)
    paged_v1v2: bool = False
    # the engine prepares the next decode step on the host while the GPU runs this one (SGLang 0.4's
    # zero-overhead batch scheduler): a step takes the longer of the two, not their sum
    overlap_scheduler: bool = False
    # the engine prefills new prompts inside the decode step's forward pass (TensorRT-LLM's in-flight
    # batching): their GEMMs share the step's weight read
    mixed_batching: bool = False
    # attention data-parallel over the TP group: each GPU holds the attention weights whole and the KV
    # cache of its own sequences only; the MLP / experts stay split (TensorRT-LLM enable_attention_dp,
    # SGLang --enable-dp-attention --dp-size)
    attention_dp: bool = False
    # tokens of the forward pass the engine sizes its activation workspace for at start-up; 0: the
    # usual budget (serve_memory.TOKEN_BUDGET). vLLM V0 without chunked prefill profiles
    # max_num_batched_tokens = max(max_model_len, 2048): a model's whole context window
    token_budget: int = 0

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True)
class ServeResult:
    """What ``perf.serve.serve`` predicts for one replica at a batch."""

    fits: bool
    max_batch: int
    batch: int
    memory_per_gpu: float  # bytes at ``batch``
    memory_capacity: float  # bytes per GPU the engine may use (vLLM: gpu_memory_utilization of it)
    memory_total: float  # the GPU's memory
    memory_breakdown: tuple[tuple[str, float], ...]
    ttft: float  # s, prefill of one prompt, plus the decode step in progress when the replica is busy
    tpot: float  # s, mean time between output tokens of one sequence at ``batch``
    decode_step: float  # s, one decode step of the whole batch
    output_tokens_per_s: float  # whole replica
    total_tokens_per_s: float  # prompt + output tokens
    requests_per_s: float
    decode_breakdown: tuple[tuple[str, float], ...]
    kv_read_factor: float = 1.0  # times a decode step reads the KV cache (``serve_memory.unshared_kv_factor``)
