"""The analytical performance model: pure functions of frozen dataclasses.

No solver, CLI, pandas or I/O here (a test checks the imports). Each model comes in two halves:
the work at unit efficiency (``train_terms``, ``serve_terms``) and its time under a GPU family's
and a stack's efficiency parameters (``step_time``, ``serve_time``), composed by ``train_step``
and ``serve``.
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
from optimizer.perf.params import ServeParams, TrainParams
from optimizer.perf.serve import ServePlan, ServeResult, serve
from optimizer.perf.specs import Device, Hardware, Link, ModelSpec, TrainPlan
from optimizer.perf.train import TrainResult, train_step

__all__ = [
    "Device",
    "Hardware",
    "Link",
    "MemoryResult",
    "ModelSpec",
    "ServeParams",
    "ServePlan",
    "ServeResult",
    "TrainParams",
    "TrainPlan",
    "TrainResult",
    "activation_bytes_per_layer",
    "gpu_hours",
    "hardware_flops_per_token",
    "model_flops_per_token",
    "param_count",
    "serve",
    "tp_bound",
    "train_step",
    "training_flops",
    "training_memory",
]
