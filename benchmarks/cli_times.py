"""Time every CLI path on the shipped examples and write benchmarks/RESULTS.md.

    python benchmarks/cli_times.py                 # median of 5, writes benchmarks/RESULTS.md
    python benchmarks/cli_times.py --repeat 3 --out /tmp/results.md

Each command runs as a user runs it, in a fresh ``gpuopt`` process; the table gives the median,
the fastest and the slowest of ``--repeat`` runs beside issue 16's target, and names the machine.
A second table times plan enumeration and the MIP in process against the number of GPU types,
``max_gpus`` (up to 16,384) and the number of workloads. Speed is measured here, never asserted in
tests.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STRESS = ROOT / "benchmarks" / "problems"  # the impossible 405B run and a 1,000-GPU 70B run


def cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(what, gpuopt arguments, issue 16's target) for every CLI path timed."""
    p = "problems/"
    return [
        ("`gpuopt --help`", ["--help"], ""),
        ("`catalog list`", ["catalog", "list"], ""),
        ("`solve lab_budget`", ["solve", p + "lab_budget.yaml"], "1.0 s"),
        ("`solve llama2_70b_pretrain`", ["solve", p + "llama2_70b_pretrain.yaml"], ""),
        ("`solve mixtral_pretrain`", ["solve", p + "mixtral_pretrain.yaml"], ""),
        ("`solve pretrain_finetune_serve`", ["solve", p + "pretrain_finetune_serve.yaml"], ""),
        ("`solve chat_and_batch_serving`", ["solve", p + "chat_and_batch_serving.yaml"], ""),
        ("`explain lab_budget`", ["explain", p + "lab_budget.yaml"], "2 s"),
        ("`report lab_budget`", ["report", p + "lab_budget.yaml", "-o", str(tmp / "report.html")], "3 s"),
        ("`compare --model llama2-7b`", ["compare", "--model", "llama2-7b"], "2 s"),
        ("`sweep lab_budget --budget 100k:2M:20`", ["sweep", p + "lab_budget.yaml", "--budget", "100k:2M:20"], "4 s"),
        ("405B / 15T / 7 days / $1M refused", ["solve", str(STRESS / "impossible_405b.yaml")], "2 s"),
        ("70B / 15T / 90 days (1,000+ GPUs)", ["solve", str(STRESS / "llama3_70b_15t_90d.yaml")], "2 s"),
    ]


def time_cli(args: list[str], repeat: int) -> tuple[list[float], int]:
    """Wall-clock seconds of ``repeat`` runs of ``gpuopt ARGS`` (and the exit code of the last)."""
    exe = Path(sys.executable).with_name("gpuopt")
    times, code = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        code = subprocess.run([str(exe), *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              check=False).returncode
        times.append(time.perf_counter() - start)
    return times, code


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} logical cores, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def scaling(repeat: int) -> list[str]:
    """Plan enumeration and MIP seconds (median) against GPU types, max_gpus and workloads."""
    from optimizer.catalog import load_catalog
    from optimizer.milp import solve
    from optimizer.plans import enumerate_candidates
    from optimizer.plans.portfolio import enumerate_portfolio
    from optimizer.problem import load_priced
    from optimizer.recommend import targets_of

    catalog = load_catalog()
    rows = ["| problem | varied | candidates | plans s | MIP s |", "|---|---|---:|---:|---:|"]

    def run(path: str, label: str, edit: object = None) -> None:
        problem, priced = load_priced(ROOT / "problems" / path, catalog)
        if edit is not None:
            problem = edit(problem)  # type: ignore[operator]
        plans, mips = [], []
        for _ in range(repeat):
            start = time.perf_counter()
            table = (enumerate_portfolio if len(problem.workloads) > 1 else enumerate_candidates)(problem, priced)
            plans.append(time.perf_counter() - start)
            start = time.perf_counter()
            solve(table, targets_of(problem), "ortools", problem.solver.time_limit_s, problem.solver.mip_gap)
            mips.append(time.perf_counter() - start)
        n = len(table.candidates) + len(table.serving)
        rows.append(f"| {path} | {label} | {n:,} | {statistics.median(plans):.2f} | {statistics.median(mips):.2f} |")

    gpus = sorted(catalog.gpus)
    for k in (1, 4, 8, 16, len(gpus)):
        run("lab_budget.yaml", f"{k} GPU types", lambda p, k=k: replace(p, gpus=tuple(gpus[:k])))
    for n in (64, 512, 4096, 16384):
        run("llama2_70b_pretrain.yaml", f"max_gpus {n:,}", lambda p, n=n: replace(p, max_gpus=n))
    run("llama2_70b_serving.yaml", "1 workload (serving)")
    run("pretrain_finetune_serve.yaml", "4 workloads")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = parser.parse_args()
    lines = ["# Benchmarks", "", f"`python benchmarks/cli_times.py --repeat {args.repeat}` on {machine()}, "
             f"{time.strftime('%Y-%m-%d')}.", "",
             f"## Every CLI path (wall clock of a fresh `gpuopt` process, {args.repeat} runs)", "",
             "| command | median s | min s | max s | exit | issue 16 target |", "|---|---:|---:|---:|---:|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for what, cli, target in cases(Path(tmp)):
            times, code = time_cli(cli, args.repeat)
            lines.append(f"| {what} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} | {code} "
                         f"| {target} |")
            print(lines[-1], flush=True)
    lines += ["", "## Scaling (in process: plan enumeration, then the MIP with OR-Tools, median of "
              f"{min(args.repeat, 3)})", ""]
    lines += scaling(min(args.repeat, 3))
    print("\n".join(lines[-12:]))
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
