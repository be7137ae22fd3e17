"""The analytical performance model: pure functions of frozen dataclasses.

No solver, CLI, pandas or I/O here (a test checks the imports).
"""

from optimizer.perf.memory import MemoryResult, activation_bytes_per_layer, training_memory
from optimizer.perf.model import (
    gpu_hours,
    hardware_flops_per_token,
    model_flops_per_token,
    param_count,
    tp_bound,
    training_flops,
)
from optimizer.perf.specs import Device, Efficiency, Hardware, Link, ModelSpec, TrainPlan
from optimizer.perf.train import TrainResult, train_step

__all__ = [
    "Device",
    "Efficiency",
    "Hardware",
    "Link",
    "MemoryResult",
    "ModelSpec",
    "TrainPlan",
    "TrainResult",
    "activation_bytes_per_layer",
    "gpu_hours",
    "hardware_flops_per_token",
    "model_flops_per_token",
    "param_count",
    "tp_bound",
    "train_step",
    "training_flops",
    "training_memory",
]
