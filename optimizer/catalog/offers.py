"""Cloud rental offers (catalogs/cloud.yaml): GPUs rented by the hour, on demand, as spot capacity
or on a committed term, each price with its source and date."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from optimizer.catalog.records import HOURS_PER_YEAR, Price, Record

Term = Literal["on-demand", "spot", "1mo", "1yr", "3yr"]
TERM_HOURS = {"1mo": HOURS_PER_YEAR / 12, "1yr": HOURS_PER_YEAR, "3yr": 3 * HOURS_PER_YEAR}


class Offer(Record):
    """A cloud rental: GPUs of one type in instances shaped like a catalog server, on a fabric
    (None: instances are not networked for training across them). ``price.usd`` is per GPU-hour.
    A committed term (a month, a year, three years) bills every hour of each term begun."""

    id: str
    provider: str
    name: str
    gpu: str
    server: str
    fabric: str | None = None
    gpus_per_instance: int = Field(ge=1, le=72)
    term: Term
    min_gpus: int | None = Field(default=None, ge=1)
    max_gpus: int | None = Field(default=None, ge=1)
    price: Price

    @property
    def term_hours(self) -> float:
        """Hours a committed term bills per GPU (0 on demand or spot, billed by use)."""
        return TERM_HOURS.get(self.term, 0.0)

    @property
    def interruptible(self) -> bool:  # spot capacity: the provider may reclaim it at any time
        return self.term == "spot"
