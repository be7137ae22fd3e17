"""Goodput: the share of a training job's wall-clock time that trains, once failures are counted.

A synchronous job stops when any of its GPUs (or their hosts and links) fails, restarts from its
last checkpoint and redoes the work since. With ``N`` GPUs each interrupting the job at a rate
``λ``, the job fails at ``Λ = N·λ``. Checkpointing every ``τ`` seconds at a cost of ``C`` seconds
each, and restarting in ``R``, wastes per second of training ``C/τ`` for the checkpoints and
``Λ·(τ/2 + R)`` for the failures (half an interval of lost work on average); the interval that
wastes least is Young's ``τ = √(2C/Λ)`` (Young 1974, "A first order approximation to the optimum
checkpoint interval"; Daly 2006, FGCS 22), which leaves a waste of ``√(2CΛ) + Λ·R``, and the wall
clock is the training time times ``1 + waste``. First order: good while ``τ`` is well below the
time between failures, which holds for every job this tool plans (a 16,384-GPU job at Llama 3's
failure rate fails every 3 hours and checkpoints every 19 minutes at one minute each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from optimizer.perf.params import Num


@dataclass(frozen=True)
class Reliability:
    """How often a GPU interrupts a job and what recovering costs (rate 0: no failures)."""

    interruptions_per_gpu_day: float = 0.0
    checkpoint_s: float = 60.0  # writing one checkpoint, the job paused
    restart_s: float = 300.0  # detecting a failure, replacing the node, reloading the checkpoint
    spot_interruptions_per_gpu_day: float = 0.0  # on spot capacity, the provider's reclaims on top
    rate_source: str = ""  # where interruptions_per_gpu_day comes from, in words

    def on_spot(self) -> Reliability:
        """The job on spot capacity: its failures and the provider's reclaims, recovered alike."""
        return replace(self, interruptions_per_gpu_day=self.interruptions_per_gpu_day
                       + self.spot_interruptions_per_gpu_day)


@dataclass(frozen=True)
class Goodput:
    fraction: float  # training time / wall-clock time
    failures_per_day: float  # of the whole job
    checkpoint_interval_s: float  # Young's optimum (inf without failures)


def goodput(gpus: int, r: Reliability) -> Goodput:
    """The goodput of a job on ``gpus`` GPUs (Young's checkpoint interval, first order)."""
    rate = gpus * r.interruptions_per_gpu_day / 86400.0  # failures per second of the whole job
    if rate <= 0.0:
        return Goodput(1.0, 0.0, math.inf)
    interval = math.sqrt(2.0 * r.checkpoint_s / rate) if r.checkpoint_s > 0 else 0.0
    return Goodput(float(fraction(gpus, r)), rate * 86400.0, interval)


def fraction(gpus: Num, r: Reliability) -> Num:
    """``goodput(gpus, r).fraction``, for one job or an array of them: 1 / (1 + √(2CΛ) + Λ·R)."""
    rate = gpus * r.interruptions_per_gpu_day / 86400.0
    if r.interruptions_per_gpu_day <= 0.0:
        return np.ones(np.shape(gpus)) if np.ndim(gpus) else 1.0
    return 1.0 / (1.0 + (np.sqrt(2.0 * r.checkpoint_s * rate) + rate * r.restart_s))
