from __future__ import annotations

from pathlib import Path

import pytest

from optimizer.catalog import Catalog, load_catalog

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(ROOT / "catalogs")


TINY = """\
schema_version: 1
name: tiny
workload:
  model: llama2-7b
  tokens: 20B
  global_batch: {max_seqs: 256}
objective: min_cost
deadline_days: 30
site: {datacenter: true, power_cap_kw: 200}
hardware: {allow_gpus: [a100-sxm-80gb, l40s], max_gpus: 64}
search: {pp: [1, 2], micro_batch: [1, 2], zero: [1]}
solver: {time_limit_s: 30}
procurement: {rent: false}
"""


@pytest.fixture
def tiny_problem(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path
