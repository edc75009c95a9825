"""The house's import rules, kept: each folder of sparkctl/ (and tasks/) imports only what its `__init__.py`
docstring's "May import:" line allows, and the import graph between the modules of sparkctl/ and tasks/ has no
cycle. Every import counts: at the top, inside a function, under `if TYPE_CHECKING:` (a module that needs another's
names for its annotations depends on it as much as one that calls it).

The "May import:" line lists the allowed modules in dotted form (sparkctl.config allows that folder and every
module in it; sparkctl.box.boxio allows that one module); prose in the same paragraph names modules by path, so it
allows nothing. A folder always imports its own modules, the standard library, third-party libraries and the
package root (sparkctl.REPO_ROOT).

The "May import:" lines also stack the folders into floors: a folder that names no other folder is on floor 0, any
other one floor above the highest it names. No module imports from a folder on its own floor or higher but its
own, and the lines themselves stack (no folder names one that names it back, at any distance).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sparkctl import REPO_ROOT

FOLDERS = ("sparkctl", "tasks")

# Imports another branch removes: (importing module, imported module) -> why it is still here. An entry no longer
# violated fails test_known_violations_are_still_violated, so the list empties as branches merge.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}
# Cycles another branch breaks: the sorted modules of the cycle -> why it is still here.
KNOWN_CYCLES: dict[tuple[str, ...], str] = {}


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO_ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for folder in FOLDERS for p in sorted((REPO_ROOT / folder).rglob("*.py"))
            if "__pycache__" not in p.parts}


def _resolved(name: str, modules) -> str | None:
    """The module of ours `name` is (a module, else the package it is in), None when it is not ours."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imported(path: Path, modules) -> set[str]:
    """Every module of ours this file imports, anywhere in it (`from a.b import c` is a.b.c when c is a module)."""
    return imports_in(path.read_text(), module_name(path), path.name == "__init__.py", modules)


def imports_in(source: str, me: str, is_package: bool, modules) -> set[str]:
    package = me if is_package else me.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source, me)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        found |= {m for m in (_resolved(n, modules) for n in names) if m and m != me}
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imported(path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def folder_of(module: str) -> str | None:
    """sparkctl.<folder> or tasks for a module in a folder; None for sparkctl's top-level modules."""
    parts = module.split(".")
    if parts[0] == "tasks":
        return "tasks"
    return ".".join(parts[:2]) if len(parts) > 2 or (len(parts) == 2 and (REPO_ROOT / "sparkctl" / parts[1]).is_dir()) \
        else None


def may_import(folder: str) -> tuple[str, ...]:
    """The dotted names the folder's "May import:" paragraph lists."""
    doc = ast.get_docstring(ast.parse((REPO_ROOT / folder.replace(".", "/") / "__init__.py").read_text())) or ""
    m = re.search(r"^May import:(.*?)(?:\n\s*\n|\Z)", doc, re.S | re.M)
    assert m, f"{folder}/__init__.py has no 'May import:' line"
    return tuple(re.findall(r"\bsparkctl(?:\.[A-Za-z_]\w*)+", m.group(1)))


def allowed(target: str, folder: str, rules: tuple[str, ...]) -> bool:
    if target == "sparkctl" or folder_of(target) == folder:
        return True
    return any(target == rule or target.startswith(rule + ".") for rule in rules)


def violations(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    rules = {}
    found = set()
    for module, targets in graph.items():
        folder = folder_of(module)
        if folder is None:
            continue
        rules.setdefault(folder, may_import(folder))
        found |= {(module, t) for t in targets if not allowed(t, folder, rules[folder])}
    return found


def test_every_folder_imports_only_what_its_docstring_allows():
    found = violations(import_graph()) - set(KNOWN_VIOLATIONS)
    assert not found, "imports a folder's 'May import:' line does not allow:\n" + "\n".join(
        f"{a} imports {b}" for a, b in sorted(found))


def test_the_import_graph_has_no_cycle():
    found = set(cycles(import_graph())) - set(KNOWN_CYCLES)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in sorted(found))


def test_known_violations_are_still_violated():
    graph = import_graph()
    stale = [f"{a} -> {b}" for a, b in KNOWN_VIOLATIONS if (a, b) not in violations(graph)]
    stale += [" <-> ".join(c) for c in KNOWN_CYCLES if c not in cycles(graph)]
    assert not stale, "remove from tests/test_imports.py's known lists:\n" + "\n".join(stale)


def test_every_import_counts_and_every_cycle_is_found():
    """The yardstick: an import inside a function and one under TYPE_CHECKING are edges; a two-module and a
    three-module cycle are found, a chain is not."""
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sparkctl.config import schema\n" \
             "def f():\n    from sparkctl.errors import SettingError\n    import sparkctl.config.lock\n"
    found = imports_in(source + "from . import lock\nfrom .schema import GroupData\n", "sparkctl.config.probe", False,
                       all_modules())
    assert found == {"sparkctl.config.schema", "sparkctl.errors", "sparkctl.config.lock"}
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(cycles(graph)) == [("a", "b"), ("c", "d", "e")]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []


def test_may_import_reads_dotted_names_only():
    assert "sparkctl.errors" in may_import("sparkctl.capacity")
    assert allowed("sparkctl.config.schema", "sparkctl.capacity", ("sparkctl.config",))
    assert not allowed("sparkctl.configx", "sparkctl.capacity", ("sparkctl.config",))
    assert not allowed("sparkctl.render.units", "sparkctl.measure", ("sparkctl.config", "sparkctl.box.boxio"))


def folder_floors(allows: dict[str, set[str]]) -> dict[str, int]:
    """Each folder's floor: 0 when it names no other folder, else one above the highest it names. A folder that
    reaches itself back through the names raises, naming the loop."""
    floors: dict[str, int] = {}

    def floor(folder: str, path: tuple[str, ...]) -> int:
        if folder in path:
            raise AssertionError("the 'May import:' lines loop: " + " -> ".join((*path[path.index(folder):], folder)))
        if folder not in floors:
            floors[folder] = 1 + max((floor(f, (*path, folder)) for f in allows.get(folder, ())), default=-1)
        return floors[folder]

    for folder in sorted(allows):
        floor(folder, ())
    return floors


def allowed_folders() -> dict[str, set[str]]:
    """Folder -> the other folders its "May import:" line names (a module of one, like sparkctl.check.load, names
    its folder)."""
    folders = {folder_of(m) for m in all_modules()} - {None}
    return {f: {folder_of(n) for n in may_import(f)} - {None, f} for f in folders}


def test_no_module_imports_from_its_own_floor_or_higher():
    floors = folder_floors(allowed_folders())
    upward = sorted((a, b) for a, targets in import_graph().items() for b in targets
                    if folder_of(a) and folder_of(b) and folder_of(a) != folder_of(b)
                    and floors[folder_of(b)] >= floors[folder_of(a)])
    assert not upward, "imports from a floor not below the importer's:\n" + "\n".join(
        f"{a} (floor {floors[folder_of(a)]}) imports {b} (floor {floors[folder_of(b)]})" for a, b in upward)
    assert floors["sparkctl.box"] == 0 and floors["sparkctl.config"] == 1  # the ground: the box, then the settings
    assert floors["sparkctl.check"] > max(floors["sparkctl.config"], floors["sparkctl.capacity"],
                                          floors["sparkctl.fleet"])


def test_floors_stack_and_a_loop_is_named():
    """The yardstick: a chain stacks; a loop at any distance is refused, naming it."""
    assert folder_floors({"a": set(), "b": {"a"}, "c": {"a", "b"}}) == {"a": 0, "b": 1, "c": 2}
    with pytest.raises(AssertionError, match="a -> b -> c -> a"):
        folder_floors({"a": {"b"}, "b": {"c"}, "c": {"a"}})
