"""The MFU ceiling: the highest model-FLOPs utilisation published dense training runs reached, per
GPU family and precision where enough were published, else over every dense run.

A run's measured figure (tokens/s, TFLOP/s or MFU, each by its source's convention) is turned into
tokens per second per GPU without the model: ``metric × (tokens per step per GPU) / scale``, since
the calibration predicts every metric as ``scale / step time``. MFU is then that rate times the
model FLOPs per token (6N plus attention, PaLM appendix B) over the dense peak of the run's
precision, the convention ``TrainResult.mfu`` reports. Mixture-of-experts runs are left out: their
lower MFU says nothing about what a dense plan can reach.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from optimizer.calibration.training import TrainingCase
from optimizer.catalog.stacks import efficiency_precision

MIN_ROWS = 10  # dense runs on a family and precision before it gets a ceiling of its own


def measured_mfu(c: TrainingCase) -> float:
    """The MFU a calibration run reached, from its measured figure."""
    per_gpu_tokens = float(c.terms.tokens_per_step) / c.plan.gpus
    tokens_per_s = c.measured * per_gpu_tokens / float(c.scale)
    return tokens_per_s * float(c.terms.model_flops_per_token) / float(c.terms.peak)


def mfu_ceilings(cases: list[TrainingCase]) -> dict[str, Any]:
    """``{default: ..., hardware: {family/precision: ...}}``, each the run with the highest MFU:
    its value (4 decimals), the dense rows it is the most of, the row and its source."""
    dense = [c for c in cases if not c.model.moe]

    def top(group: list[TrainingCase]) -> dict[str, Any]:
        best = max(group, key=lambda c: (measured_mfu(c), c.row))
        return {"value": round(measured_mfu(best), 4), "rows": len(group), "row": best.row, "source": best.source}

    groups: dict[str, list[TrainingCase]] = defaultdict(list)
    for c in dense:  # BF16 and FP16 runs together: one tensor rate
        groups[f"{c.family}/{efficiency_precision(c.precision)}"].append(c)
    hardware = {key: top(groups[key]) for key in sorted(groups) if len(groups[key]) >= MIN_ROWS}
    return {"default": top(dense), "hardware": hardware}
