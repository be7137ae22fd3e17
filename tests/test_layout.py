"""The shape of the code (issue 14): stages import one way only, and modules and functions stay
small. Today's oversized modules and functions are listed with their sizes as debt that may only
shrink; anything new over the limits fails."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "optimizer"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# Stages from the bottom up; a module may import its own stage and those below it, never above.
# perf imports nothing of gpuopt (test_cli.test_perf_is_pure), so it sits under the catalog that
# names its records; the API sits on every stage, and the CLI only on the API.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("errors", "validation", "parallel")),
    ("perf", ("perf",)),
    ("catalog", ("catalog",)),
    ("problem", ("problem",)),
    ("calibration", ("calibration",)),
    ("plans", ("plans",)),
    ("milp", ("milp",)),
    ("recommend", ("recommend", "estimate")),
    ("report", ("report",)),
    ("tradeoffs", ("tradeoffs",)),
    ("api", ("api", "results")),
    ("cli", ("cli",)),
)

# Debt: modules over MAX_MODULE_LINES and functions over MAX_FUNCTION_LINES, at most this long (paid off:
# keep the ledgers for the next exception, which must shrink the same way).
LONG_MODULES: dict[str, int] = {}
LONG_FUNCTIONS: dict[str, int] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _stage(module: str) -> int:
    head = module.split(".")[0]
    for i, (_, members) in enumerate(STAGES):
        if head in members:
            return i
    raise AssertionError(f"optimizer.{module} belongs to no stage: add it to STAGES in {Path(__file__).name}")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("optimizer"):
            if node.module == "optimizer":
                found |= {a.name for a in node.names}
            else:
                found.add(node.module.removeprefix("optimizer."))
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("optimizer.") for a in node.names if a.name.startswith("optimizer.")}
    return found


def test_every_module_belongs_to_a_stage():
    for module in _modules():
        if module:
            _stage(module)


def test_stages_import_one_way_only():
    upward = []
    for module, path in _modules().items():
        if not module:
            continue
        here = _stage(module)
        for target in _imports(path):
            if _stage(target) > here:
                upward.append(f"optimizer.{module} ({STAGES[here][0]}) imports optimizer.{target} "
                              f"({STAGES[_stage(target)][0]})")
    assert not upward, "imports against the flow of stages:\n  " + "\n  ".join(sorted(upward))


def _functions(path: Path, module: str) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function and method, nested ones included."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}"
                out.append((name, (child.end_lineno or child.lineno) - child.lineno + 1))
                visit(child, name)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}.{child.name}")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), module)
    return out


def test_modules_stay_small():
    over = []
    for module, path in _modules().items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        name = module or "__init__"
        allowed = LONG_MODULES.get(name, MAX_MODULE_LINES)
        if lines > allowed:
            over.append(f"optimizer.{name}: {lines} lines (at most {allowed})")
    assert not over, "modules too long; split them by what they do:\n  " + "\n  ".join(over)


def test_functions_stay_small():
    over = []
    for module, path in _modules().items():
        for name, lines in _functions(path, module or "__init__"):
            allowed = LONG_FUNCTIONS.get(name, MAX_FUNCTION_LINES)
            if lines > allowed:
                over.append(f"optimizer.{name}: {lines} lines (at most {allowed})")
    assert not over, "functions too long; give each part a name:\n  " + "\n  ".join(over)


def test_the_debt_is_real():
    """Every entry of the debt lists still exceeds the limit (a paid-off entry is removed)."""
    sizes = {module or "__init__": len(p.read_text(encoding="utf-8").splitlines()) for module, p in _modules().items()}
    functions = {n: size for m, p in _modules().items() for n, size in _functions(p, m or "__init__")}
    for name in LONG_MODULES:
        assert sizes.get(name, 0) > MAX_MODULE_LINES, f"{name} is within the limit now: remove it from LONG_MODULES"
    for name in LONG_FUNCTIONS:
        assert functions.get(name, 0) > MAX_FUNCTION_LINES, f"{name} is short now: remove it from LONG_FUNCTIONS"


def test_stages_dispatch_on_the_workload_type():
    """A problem's workloads are typed (``TrainWorkload | ServeWorkload``): no module tests a
    problem's kind as a string, and no 'multi' kind or 'phases' list is left (issue 14)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "kind" \
                    and any(isinstance(c, ast.Constant) and c.value in ("train", "serve", "multi")
                            for c in node.comparators):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .kind == string")
            if isinstance(node, ast.Attribute) and node.attr == "phases":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .phases")
    assert not found, found
