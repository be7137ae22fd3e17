"""Servers that fit the site (issue 15, item 5): workstation towers, desktops and consumer rigs are
not chosen in a data centre unless the problem allows them, and the output flags them where they
are chosen."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from optimizer.cli import main

PROBLEM = """\
schema_version: 1
name: dc-towers
workload:
  kind: serve
  model: llama2-7b
  precisions: [fp16]
  classes:
    - {name: chat, input_len: 512, output_len: 256, output_tokens_per_s: 5k, tpot_ms: 60}
objective: min_cost
procurement: {rent: false}  # buying: where the towers may stand
site: {datacenter: true}
hardware:
  allow_gpus: [rtx-6000-ada, l40s]
solver: {time_limit_s: 20}
"""


def _solve(tmp_path: Path, text: str, *args: str):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return CliRunner().invoke(main, ["solve", str(path), *args])


def _servers(out: str) -> set[str]:
    return {line.split()[1] for line in out.splitlines() if line.startswith("server ")}


def test_a_data_centre_takes_rack_servers_only_unless_towers_are_allowed(tmp_path):
    dc = _solve(tmp_path, PROBLEM)
    assert dc.exit_code == 0, dc.output
    assert "desktop-4" not in _servers(dc.output) and "Workstation chassis" not in dc.output
    allowed = _solve(tmp_path, PROBLEM.replace("{datacenter: true}", "{datacenter: true, allow_workstations: true}"))
    assert allowed.exit_code == 0, allowed.output
    assert "desktop-4" in _servers(allowed.output)  # the tower is the cheaper home for these cards
    assert "Workstation chassis: desktop-4" in allowed.output and "allowed by site.allow_workstations" in allowed.output
    lab = _solve(tmp_path, PROBLEM.replace("{datacenter: true}", "{datacenter: false}"))
    assert "desktop-4" in _servers(lab.output) and "the site is not a data centre" in lab.output


def test_a_gpu_only_towers_take_is_out_of_a_data_centre_with_the_reason(tmp_path):
    text = PROBLEM.replace("[rtx-6000-ada, l40s]", "[rtx-6000-ada, l40s]\n  exclude_servers: [pcie-4, pcie-8]")
    r = CliRunner()
    path = tmp_path / "p.yaml"
    path.write_text(text)
    out = r.invoke(main, ["explain", str(path)]).output
    assert "only workstation towers or consumer rigs take it" in out and "site.allow_workstations: true" in out


def test_owned_towers_in_a_data_centre_are_used_and_said_to_be_owned(tmp_path):
    tower = "inventory:\n  - {gpu: rtx-6000-ada, count: 4, server: desktop-4, servers: 1}\nsolver:"
    owned = PROBLEM.replace("solver:", tower)
    r = _solve(tmp_path, owned)
    assert r.exit_code == 0, r.output
    assert "Workstation chassis: desktop-4" in r.output and "owned, already on site" in r.output
    assert "desktop-4" not in _servers(r.output)  # none bought: only the owned tower
