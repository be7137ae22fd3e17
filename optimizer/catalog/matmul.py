"""The share of a GPU's peak a matmul reaches: measured Maximum Achievable Matmul FLOPS (stas00's
MAMF table, catalogs/gpus.yaml ``mamf_bf16_tflops`` / ``mamf_fp8_tflops``) over the entry's own peak.
A stack's or engine's fitted GEMM efficiency (training and serving) is a share of it, so that it
carries over between parts:
Gaudi 2 reaches 97 % of its BF16 peak, an H100 80 %, an MI300X 51 %.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import mean, median

from optimizer.catalog.records import Gpu


def _measured(gpu: Gpu, precision: str) -> float | None:
    """A part's own measured share at ``precision`` (bf16 or fp8), if any."""
    tflops, peak = getattr(gpu, f"mamf_{precision}_tflops"), gpu.tflops(precision)
    return min(tflops / peak, 1.0) if tflops and peak else None


def achievable_shares(gpus: Mapping[str, Gpu]) -> dict[str, tuple[tuple[str, float], ...]]:
    """Every GPU's (precision, measured MAMF / peak): its own measurement, else the mean over the
    distinct measurements of its family (a figure two parts share, as the H100's BF16 one that
    stas00 gives the H200 too, counts once); for FP8, else its BF16 share; else the median of the
    measured parts' distinct shares (an assumption for the families no one measured: GeForce, Ada,
    Volta, CDNA 2)."""
    measured = {(g.id, p): v for g in gpus.values() for p in ("bf16", "fp8") if (v := _measured(g, p))}
    by_family: dict[tuple[str, str], set[float]] = {}
    for (gpu_id, precision), v in measured.items():
        by_family.setdefault((gpus[gpu_id].family, precision), set()).add(v)
    measured_bf16 = sorted({v for (_, p), v in measured.items() if p == "bf16"})
    typical = median(measured_bf16) if measured_bf16 else 1.0

    def share(gpu: Gpu, precision: str) -> float | None:
        family = by_family.get((gpu.family, precision))
        return measured.get((gpu.id, precision)) or (mean(sorted(family)) if family else None)

    out: dict[str, tuple[tuple[str, float], ...]] = {}
    for gpu in gpus.values():
        bf16 = share(gpu, "bf16") or typical
        shares = [("bf16", bf16), ("fp16", bf16)]
        if gpu.fp8_tflops:
            shares.append(("fp8", share(gpu, "fp8") or bf16))
        out[gpu.id] = tuple(shares)
    return out
