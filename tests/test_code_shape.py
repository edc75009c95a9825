"""Code shape (issue 17): every function in sparkctl/ and tasks/ is short and simple enough to read at once.

A function is at most MAX_LINES lines long (its `def` line to its last line; a nested function counts towards the
function it sits in) and has a cyclomatic complexity of at most MAX_COMPLEXITY as radon computes it (McCabe's count
plus each boolean operator and comprehension: the figures issue 17 quotes, e.g. 47 for the old transaction). Extension-less Python scripts (the simulated Spark's stand-ins) are measured too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from radon.complexity import cc_visit_ast

from sparkctl import REPO_ROOT

MAX_LINES = 60  # lines of one function, `def` to its last line
MAX_COMPLEXITY = 15  # cyclomatic complexity of one function (radon's count, nested functions included)
MEASURED_FOLDERS = ("sparkctl", "tasks")

# Deliberate exceptions, (path, name) -> why it stays longer (none today); an entry that is back within the limits
# fails test_allowed_functions_are_still_over_a_limit, so the list cannot go stale.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Shape:
    path: str  # relative to the repository root
    line: int
    name: str  # Class.method for methods
    lines: int
    complexity: int

    @property
    def too_big(self) -> bool:
        return self.lines > MAX_LINES or self.complexity > MAX_COMPLEXITY

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name}: {self.lines} lines, complexity {self.complexity}"


def is_python_script(path: Path) -> bool:
    """An extension-less file whose shebang runs Python (the stand-ins uploaded to the simulated Spark)."""
    with path.open("rb") as handle:
        first = handle.readline()
    return first.startswith(b"#!") and b"python" in first


def python_sources(root: Path) -> list[Path]:
    found = []
    for folder in MEASURED_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if path.suffix == ".py" or (not path.suffix and is_python_script(path)):
                found.append(path)
    return found


def functions(node: ast.AST, prefix: str = ""):
    """Every outermost function in `node` with its qualified name; nested functions belong to their parent."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + child.name, child
        elif isinstance(child, ast.ClassDef):
            yield from functions(child, f"{prefix}{child.name}.")
        else:
            yield from functions(child, prefix)


def complexity(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    (block,) = cc_visit_ast(ast.Module(body=[function], type_ignores=[]))
    return _with_closures(block)


def _with_closures(block) -> int:
    """radon scores a nested function on its own; here it counts towards the function it sits in."""
    return block.complexity + sum(_with_closures(inner) for inner in block.closures)


def shapes_of(source: str, path: str) -> list[Shape]:
    tree = ast.parse(source, path)
    return [Shape(path, node.lineno, name, node.end_lineno - node.lineno + 1, complexity(node))
            for name, node in functions(tree)]


def all_shapes(root: Path = REPO_ROOT) -> list[Shape]:
    shapes = []
    for path in python_sources(root):
        shapes += shapes_of(path.read_text(), str(path.relative_to(root)))
    return shapes


def test_every_function_is_short_and_simple():
    too_big = [shape for shape in all_shapes() if shape.too_big]
    for shape in too_big:
        print(shape, f"(allowed: {ALLOWED[shape.path, shape.name]})" if (shape.path, shape.name) in ALLOWED else "")
    offenders = [str(shape) for shape in too_big if (shape.path, shape.name) not in ALLOWED]
    assert not offenders, (f"over {MAX_LINES} lines or complexity {MAX_COMPLEXITY}; split them:\n"
                           + "\n".join(offenders))


def test_allowed_functions_are_still_over_a_limit():
    by_name = {(shape.path, shape.name): shape for shape in all_shapes()}
    stale = []
    for path, name in ALLOWED:
        shape = by_name.get((path, name))
        if shape is None:
            stale.append(f"{path} {name}: no such function")
        elif not shape.too_big:
            stale.append(f"{shape}: now within the limits")
    assert not stale, "remove from ALLOWED in tests/test_code_shape.py:\n" + "\n".join(stale)


def function_of(name: str, lines: int = 2, branches: int = 0, indent: str = "") -> str:
    """Source of a function `lines` long (def line included, at least 2 + 2 x branches) with `branches` ifs:
    complexity branches + 1."""
    body = [f"    if x == {i}:\n        x += {i}" for i in range(branches)]
    body += ["    x += 1"] * (lines - 2 - 2 * branches) + ["    return x"]
    return "\n".join(indent + line for line in [f"def {name}(x):", *"\n".join(body).split("\n")]) + "\n"


def test_the_measure_counts_lines_and_branches_up_to_the_limits():
    """The yardstick itself: a function at the limits passes, one line or one branch more does not; a method is
    named with its class, and a nested function counts towards the function it is in."""
    source = (function_of("at_limits", MAX_LINES, MAX_COMPLEXITY - 1) + function_of("long", MAX_LINES + 1)
              + "class K:\n" + function_of("branchy", 40, MAX_COMPLEXITY, indent="    ")
              + "def outer(x):\n" + function_of("inner", 25, 10, indent="    ") + "    return inner(x)\n")
    shapes = {shape.name: shape for shape in shapes_of(source, "example.py")}
    assert sorted(shapes) == ["K.branchy", "at_limits", "long", "outer"]
    assert (shapes["at_limits"].lines, shapes["at_limits"].complexity) == (MAX_LINES, MAX_COMPLEXITY)
    assert not shapes["at_limits"].too_big
    assert shapes["long"].lines == MAX_LINES + 1 and shapes["long"].too_big
    assert shapes["K.branchy"].complexity == MAX_COMPLEXITY + 1 and shapes["K.branchy"].too_big
    # outer: its def, inner's 25 lines, its return; inner's ten branches, a path around inner, outer's own path
    assert (shapes["outer"].lines, shapes["outer"].complexity) == (27, 10 + 1 + 1)


def test_the_stand_in_scripts_are_measured():
    measured = {str(path.relative_to(REPO_ROOT)) for path in python_sources(REPO_ROOT)}
    assert "sparkctl/sim/standins/nvidia-smi" in measured
    assert "sparkctl/sim/standins/nvcc" not in measured  # a shell script
