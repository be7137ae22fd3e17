"""The trade-off commands: ``sweep``, ``explain``, ``compare`` and ``report`` (thin, like cli.commands)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from optimizer import api as go
from optimizer.cli.common import catalog_option, handle_errors, price_option, workers_option

solver_option = click.option("--solver", type=click.Choice(["ortools", "pulp"]), default=None,
                             help="MIP backend (default: the problem's solver.backend).")
time_limit_option = click.option("--time-limit", type=click.FloatRange(min=1), default=None,
                                 help="Seconds per MIP solve (default: the problem's solver.time_limit_s).")


def _png_path(path: Path | None) -> None:
    if path is not None and path.suffix.lower() != ".png":
        raise go.ProblemError(f"--plot {path}: the chart is a PNG. To fix: name it {path.with_suffix('.png')}.")


@click.command()
@click.argument("problem_file", type=click.Path(path_type=Path))
@click.option("--budget", default=None, help="Budgets in USD: START:STOP:COUNT (100k:2M:20), a list (250k,500k,1M) "
                                             "or one value.")
@click.option("--deadline", default=None, help="Deadlines in days (min_cost training problems), e.g. 15:90:16.")
@click.option("--tokens", default=None, help="Training tokens, e.g. 500B:4T:8.")
@click.option("--power", default=None, help="Power caps in kW, e.g. 10:60:6.")
@click.option("--demand", default=None, help="Serving: total output tokens/s (every class scaled), e.g. 5k:50k:10.")
@click.option("--price", "prices", multiple=True,
              help="Price scenario of a catalog entry: ID=-30% (change), ID=25000 (USD), or several values "
                   "(h100-sxm=-30%:0%:4). Repeat for more entries.")
@click.option("--csv", "csv_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every point as CSV (deterministic: same inputs, same bytes).")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a PNG: the frontier by GPU choice and the cost of each point by category.")
@workers_option("the points, solved in parallel")
@click.option("--format", "fmt", type=click.Choice(["text", "csv", "json"]), default="text", show_default=True)
@solver_option
@time_limit_option
@catalog_option
@handle_errors
def sweep(problem_file: Path, budget: str | None, deadline: str | None, tokens: str | None, power: str | None,
          demand: str | None, prices: tuple[str, ...], csv_file: Path | None, plot_file: Path | None, workers: int,
          fmt: str, solver: str | None, time_limit: float | None, catalog_dir: Path | None) -> None:
    """Re-solve PROBLEM_FILE over a grid of budgets, deadlines, tokens, power caps, demands or prices.

    Several axes make a grid (every combination). Prints every point, the Pareto frontier of cost
    against time (or serving capacity) with the GPU choice at each point, and checks that relaxing
    any axis never made the optimum worse (a violation is reported as a bug, exit 2).

    \b
    Examples:
      gpuopt sweep problems/lab_budget.yaml --budget 100k:2M:20 --plot sweep.png
      gpuopt sweep problems/lab_budget.yaml --budget 250k,500k,1M --power 20,30,60 --csv grid.csv
      gpuopt sweep problems/llama2_70b_pretrain.yaml --deadline 20:60:5 --price b200=-30%,0%
    """
    _png_path(plot_file)
    problem = go.load_problem(problem_file, go.load_catalog(catalog_dir))
    start = time.perf_counter()

    def progress(stream, total):  # a bar on a terminal; nothing in a pipe or a log
        with click.progressbar(stream, length=total, label=f"solving {total} points", file=sys.stderr) as bar:
            yield from bar

    result = go.sweep(problem, budget, deadline, tokens, power, demand, prices, solver, time_limit, workers,
                      progress if sys.stderr.isatty() else None)
    points = len(result.result.rows)
    click.echo(f"{points} points in {time.perf_counter() - start:,.1f} s with {min(workers, points)} worker(s)",
               err=True)
    click.echo(result.render(fmt), nl=False)
    if csv_file is not None:
        csv_file.write_text(result.render("csv"), encoding="utf-8")
        click.echo(f"CSV written to {csv_file}", err=True)
    if plot_file is not None:
        result.write_png(plot_file)
        click.echo(f"chart written to {plot_file}", err=True)
    if result.violations:
        raise go.SolverError("the sweep's optimum got worse when an axis was relaxed (a bug):\n  "
                          + "\n  ".join(result.violations))


@click.command()
@click.argument("problem_file", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@solver_option
@time_limit_option
@price_option
@catalog_option
@handle_errors
def explain(problem_file: Path, fmt: str, solver: str | None, time_limit: float | None, prices: tuple[str, ...],
            catalog_dir: Path | None) -> None:
    """Why the optimum of PROBLEM_FILE is what it is.

    For every GPU in the catalog: the best cluster of that type alone, or why it is out, in
    numbers. Which limits bind at the optimum and what relaxing each by 10 % is worth. For an
    infeasible problem: the smallest change of budget, power or deadline that makes it feasible
    (exit 1).

    \b
    Example:
      gpuopt explain problems/lab_budget.yaml
    """
    problem = go.load_problem(problem_file, go.load_catalog(catalog_dir), prices)
    result = go.explain(problem, solver, time_limit)
    click.echo(result.render(fmt), nl=False)
    if not result.feasible:
        sys.exit(1)


@click.command()
@click.option("--model", "model_ref", required=True, help="Preset id (llama2-7b, …), a YAML "
              "file with the shape, or a Hugging Face config.json (or its directory).")
@click.option("--workload", type=click.Choice(["train", "serve", "both"]), default="both", show_default=True)
@click.option("--gpus", type=click.IntRange(min=1, max=100_000), default=64, show_default=True,
              help="Reference training cluster size.")
@click.option("--input-len", type=click.IntRange(min=1), default=512, show_default=True)
@click.option("--output-len", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--tpot-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Serving latency limit per output token (default: none, throughput only).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@catalog_option
@handle_errors
def compare(model_ref: str, workload: str, gpus: int, input_len: int, output_len: int, tpot_ms: float | None,
            fmt: str, catalog_dir: Path | None) -> None:
    """Every GPU side by side for one model: training tokens/s per GPU and per dollar, serving
    output tokens per dollar, and the least GPUs that hold the model, from gpuopt's own model.

    \b
    Examples:
      gpuopt compare --model llama2-7b
      gpuopt compare --model llama2-70b --workload serve --tpot-ms 50
    """
    result = go.compare(model_ref, workload, gpus, input_len, output_len, tpot_ms, go.load_catalog(catalog_dir))
    click.echo(result.render(fmt), nl=False)


@click.command("report")
@click.argument("problem_file", type=click.Path(path_type=Path))
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The HTML file to write.")
@click.option("--sweep-points", type=click.IntRange(min=0, max=200), default=8, show_default=True,
              help="Points of the trade-off sweep (budget, deadline or demand, x0.25-x2); 0 leaves it out.")
@workers_option("the sweep")
@solver_option
@time_limit_option
@price_option
@catalog_option
@handle_errors
def report_cmd(problem_file: Path, output: Path, sweep_points: int, workers: int, solver: str | None,
               time_limit: float | None, prices: tuple[str, ...], catalog_dir: Path | None) -> None:
    """Write one self-contained HTML report for PROBLEM_FILE: the recommendation, the bill of
    materials, the cost breakdown, a trade-off sweep with its chart, and every GPU on its own.

    \b
    Example:
      gpuopt report problems/lab_budget.yaml -o report.html
    """
    if output.suffix.lower() not in (".html", ".htm"):
        raise go.ProblemError(f"-o {output}: the report is HTML. To fix: name it {output.with_suffix('.html')}.")
    problem = go.load_problem(problem_file, go.load_catalog(catalog_dir), prices)
    html = go.report(problem, sweep_points, workers, solver, time_limit,
                     lambda message: click.echo(message, err=True))
    output.write_text(html, encoding="utf-8")
    click.echo(f"report written to {output}", err=True)
