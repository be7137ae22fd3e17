"""The share of a GPU's peak a matmul reaches: measured Maximum Achievable Matmul FLOPS over the
theoretical peak (stas00's MAMF table, catalogs/gpus.yaml ``mamf_bf16`` / ``mamf_fp8``). A serving
engine's fitted GEMM efficiency is a share of it, so that it carries over between parts: Gaudi 2
reaches 97 % of its BF16 peak, an H100 80 %, an MI300X 51 %.
"""

from __future__ import annotations

from collections.abc import Mapping

from optimizer.catalog.records import Gpu


def achievable_shares(gpus: Mapping[str, Gpu], gpu_id: str) -> tuple[tuple[str, float], ...]:
    """(precision, measured MAMF / theory) of a GPU: its own measurement, else the mean of its
    family's measured parts; for FP8, else its BF16 share; else the median of every measured part
    (an assumption for the families no one measured: GeForce, Ada, Volta, CDNA 2)."""
    gpu = gpus[gpu_id]

    def share(field: str) -> float | None:
        family = [v for g in gpus.values() if g.family == gpu.family and (v := getattr(g, field))]
        return getattr(gpu, field) or (sum(family) / len(family) if family else None)

    every = sorted(g.mamf_bf16 for g in gpus.values() if g.mamf_bf16)
    bf16 = share("mamf_bf16") or (every[len(every) // 2] if every else 1.0)
    out = [("bf16", bf16), ("fp16", bf16)]
    if gpu.fp8_tflops:
        out.append(("fp8", share("mamf_fp8") or bf16))
    return tuple(out)
