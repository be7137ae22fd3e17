"""The roofline: how long a kernel takes that both moves bytes and does math."""

from __future__ import annotations

import math

import numpy as np

from optimizer.perf.params import Num


def roofline(memory: Num, compute: Num, ridge: Num) -> Num:
    """Time of a kernel that moves ``memory`` seconds of bytes and does ``compute`` seconds of math.

    The roofline (Williams et al. 2009) takes the longer of the two: a bound that measured kernels
    fall furthest short of at the ridge point, where the two are equal (NVIDIA's Matrix
    Multiplication Background User's Guide, 2023, section 2: GEMM throughput against arithmetic
    intensity bends there, it does not break). Smoothed as the k-norm ``(mᵏ + cᵏ)^(1/k)``, with
    ``k`` such that a kernel at the ridge takes ``ridge`` (``2^(1/k)``) times either; ``ridge ≤ 1``
    is the roofline itself, ``ridge = 2`` the sum of the two times. The smoothing reaches beyond the
    ridge: at the ridge_slowdown of 1.8 fitted to the serving rows, a kernel whose shorter time is a
    third of its longer takes 1.24 times the longer. Element-wise arithmetic only."""
    if isinstance(memory, float) and isinstance(compute, float) and isinstance(ridge, float):
        return _scalar(memory, compute, ridge)  # the planner's many one-plan calls: no numpy overhead
    longer = np.maximum(memory, compute)
    k = math.log(2.0) / np.log(np.maximum(ridge, 1.0 + 1e-12))
    finite = np.isfinite(longer) & (longer > 0)  # an infinite time stays infinite, not NaN
    ratio = np.where(finite, np.minimum(memory, compute) / np.where(finite, longer, 1.0), 0.0)
    return np.where(ridge <= 1.0, longer, longer * (1.0 + ratio ** k) ** (1.0 / k))[()]  # [()]: a scalar stays one


def _scalar(memory: float, compute: float, ridge: float) -> float:
    """``roofline`` of plain numbers, with ``math`` (the same arithmetic; a test checks)."""
    longer = max(memory, compute)
    if ridge <= 1.0 or not 0.0 < longer < math.inf:
        return longer
    k = math.log(2.0) / math.log(ridge)
    return float(longer * (1.0 + (min(memory, compute) / longer) ** k) ** (1.0 / k))
