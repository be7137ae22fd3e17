"""Model presets and inline model shapes: a transformer's shape as catalogs/models.yaml or a problem
file spells it out, checked once and turned into the performance model's ``ModelSpec``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from optimizer.perf.specs import ModelSpec


class ModelShape(BaseModel):
    """A transformer's shape as a catalog preset or a problem file spells it out: what the
    performance model's ModelSpec needs (dimensions, GQA, MoE, multi-head latent attention, sliding
    windows and hybrid linear attention). One schema, one set of checks, for both."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    layers: int = Field(ge=1, le=1000)
    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int | None = Field(default=None, ge=1)  # None: as many as heads (no GQA)
    ffn_hidden: int = Field(ge=1)
    vocab: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    mlp: Literal["gelu", "swiglu", "relu2"]
    experts: int = Field(default=0, ge=0)
    experts_active: int = Field(default=0, ge=0)
    shared_experts: int = Field(default=0, ge=0)
    expert_ffn_hidden: int = Field(default=0, ge=0)
    dense_layers: int = Field(default=0, ge=0)
    q_lora_rank: int = Field(default=0, ge=0)
    kv_lora_rank: int = Field(default=0, ge=0)
    qk_rope_dim: int = Field(default=0, ge=0)
    qk_nope_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0)
    head_dim: int = Field(default=0, ge=0)  # 0: hidden // heads
    tie_embeddings: bool | None = None  # None: tied for gelu (GPT) blocks, untied for swiglu
    sliding_window: int = Field(default=0, ge=0)
    sliding_layers: int = Field(default=0, ge=0)
    linear_layers: int = Field(default=0, ge=0)  # Gated DeltaNet layers of a hybrid model (Qwen3-Next, Qwen3.5)
    linear_key_heads: int = Field(default=0, ge=0)
    linear_value_heads: int = Field(default=0, ge=0)
    linear_head_dim: int = Field(default=0, ge=0)
    linear_conv_kernel: int = Field(default=4, ge=1)  # Gated DeltaNet's causal convolution width
    attn_output_gate: bool = False  # the full-attention layers gate their output (Qwen3-Next, Qwen3.5)

    @model_validator(mode="after")
    def _consistent(self) -> ModelShape:
        if self.experts and not (0 < self.experts_active <= self.experts and self.expert_ffn_hidden > 0):
            raise ValueError("an MoE model needs 0 < experts_active <= experts and expert_ffn_hidden > 0")
        if self.sliding_layers > self.layers or bool(self.sliding_layers) != bool(self.sliding_window):
            raise ValueError("sliding_layers (at most layers) and sliding_window go together")
        if self.linear_layers and not (self.linear_layers + self.sliding_layers < self.layers
                                       and self.linear_key_heads and self.linear_value_heads
                                       and self.linear_head_dim):
            raise ValueError("linear_layers (fewer than layers, with at least one full-attention layer left) "
                             "need linear_key_heads, linear_value_heads and linear_head_dim")
        if self.hidden % self.heads and not self.head_dim:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.kv_heads and self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        return self

    def shape_spec(self, name: str) -> ModelSpec:
        return ModelSpec(
            name=name, layers=self.layers, hidden=self.hidden, heads=self.heads, kv_heads=self.kv_heads or self.heads,
            ffn_hidden=self.ffn_hidden, vocab=self.vocab, seq_len=self.seq_len, mlp=self.mlp, experts=self.experts,
            experts_active=self.experts_active, shared_experts=self.shared_experts,
            expert_ffn_hidden=self.expert_ffn_hidden, dense_layers=self.dense_layers, q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank, qk_rope_dim=self.qk_rope_dim, qk_nope_dim=self.qk_nope_dim,
            v_head_dim=self.v_head_dim, attn_head_dim=self.head_dim, tie_embeddings=self.tie_embeddings,
            sliding_window=self.sliding_window, sliding_layers=self.sliding_layers,
            linear_layers=self.linear_layers, linear_key_heads=self.linear_key_heads,
            linear_value_heads=self.linear_value_heads, linear_head_dim=self.linear_head_dim,
            linear_conv_kernel=self.linear_conv_kernel,
            attn_output_gate=self.attn_output_gate)


class ModelPreset(ModelShape):
    """A model of catalogs/models.yaml: its shape, the parameter counts its card publishes, a source."""

    id: str
    name: str
    published_params_b: float | None = None
    published_active_params_b: float | None = None
    # where a card gives only its name's figures ("80B total, 3B activated"), how far they are rounded
    # (billions): a count is checked against them to within this, not to half a percent (0: stated exactly)
    published_rounding_b: float = Field(default=0.0, ge=0.0)
    source: str

    def spec(self) -> ModelSpec:
        return self.shape_spec(self.id)
