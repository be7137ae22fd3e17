"""What the site and the job allow for beyond the model: the power cap (IT power, or at the wall
over the PUE), the memory headroom, and the failures and restarts of a training job."""

from __future__ import annotations

from typing import TypedDict

from optimizer.catalog import Catalog
from optimizer.perf.goodput import Reliability
from optimizer.problem.schema import ProblemFile


class PowerCaps(TypedDict):
    power_cap_w: float | None
    facility_power_cap_w: float | None


def power_caps(spec: ProblemFile, pue: float) -> PowerCaps:
    """The IT power the site allows: ``site.power_cap_kw`` as given (IT power), or what
    ``site.facility_power_cap_kw`` (at the wall) leaves at the site's PUE, the lower where both are
    given; the facility cap is kept to state answers against it."""
    it = spec.site.power_cap_kw * 1e3 if spec.site.power_cap_kw else None
    wall = spec.site.facility_power_cap_kw * 1e3 if spec.site.facility_power_cap_kw else None
    caps = [c for c in (it, wall / pue if wall else None) if c is not None]
    return PowerCaps(power_cap_w=min(caps) if caps else None, facility_power_cap_w=wall)


class Margins(TypedDict):
    memory_headroom: float
    reliability: Reliability


def margins(spec: ProblemFile, catalog: Catalog) -> Margins:
    """What a training plan allows for beyond the model: the memory headroom, and failures and
    restarts (the problem's goodput section over the catalog's rate and recovery times)."""
    g, hw = spec.goodput, spec.hardware
    reliability = catalog.facility.reliability.reliability(g.interruptions_per_gpu_day, g.checkpoint_minutes,
                                                           g.restart_minutes)
    headroom = catalog.efficiency.memory_headroom if hw.memory_headroom is None else hw.memory_headroom
    return Margins(memory_headroom=headroom, reliability=reliability)
