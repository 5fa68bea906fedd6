"""The layout's rules, checked on the source: no import circle inside any package (an import inside a function
counts too: it is still a dependency, only a late one), and the searcher and the training loop stay thin compositions of their stages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"core": "spanseek.core", "indexer": "spanseek.indexer", "trainer": "spanseek.trainer",
            "service": "spanseek.service", "spanseek": "spanseek"}


def module_imports(package: str) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (anywhere in its body)."""
    prefix = PACKAGES[package]
    modules = {f"{prefix}.{p.stem}": p for p in (ROOT / package).glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            deps |= {t for t in targets if t in modules and t != name}
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finder_finds_a_circle_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_circle_inside_a_package(package):
    cycle = find_cycle(module_imports(package))
    assert cycle is None, " -> ".join(cycle or [])


SEARCH_PATH = ("search", "ranking", "dense", "fusion", "reading", "page", "plan", "hits", "selection")


def test_the_searcher_is_small_and_no_search_function_is_long():
    assert len((ROOT / "core" / "search.py").read_text().splitlines()) <= 250
    for module in SEARCH_PATH:
        tree = ast.parse((ROOT / "core" / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                assert length <= 60, f"core/{module}.py: {node.name} is {length} lines"


def test_the_training_loop_is_a_small_composition_and_no_trainer_module_is_long():
    """The loop composes modules of one job each (the epoch order, the teacher, the optimizer's state, checkpoints,
    the stop, progress, the summary): it grew to 494 lines when they lived in it."""
    assert len((ROOT / "trainer" / "loop.py").read_text().splitlines()) <= 250
    for path in sorted((ROOT / "trainer").glob("*.py")):
        assert len(path.read_text().splitlines()) <= 500, f"trainer/{path.name}"


def test_the_filter_and_live_snapshot_modules_are_not_long():
    """The field index, the views of a live snapshot over its base and the snapshot itself are modules of one job each
    (the field index reached 510 lines while it also held the chained views)."""
    for name in ("fieldindex", "chained", "segment"):
        assert len((ROOT / "core" / f"{name}.py").read_text().splitlines()) <= 500, f"core/{name}.py"
