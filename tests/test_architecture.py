"""The structure as contracts (issue 38; docs/architecture.md, "Layers"): the layers of pyproject.toml's
``[tool.importlinter]`` hold, the module graph has no cycle, and the few imports that run up are listed."""

import ast
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("privreid", include_external_packages=False, cache_dir=None)


def strongly_connected(graph) -> list[set[str]]:
    """The groups of modules that import each other round a cycle (Tarjan), imports inside functions included."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def test_the_cycle_finder_finds_a_cycle():
    toy = grimp.ImportGraph()
    for a, b in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        toy.add_import(importer=a, imported=b)
    assert strongly_connected(toy) == [{"p.a", "p.b", "p.c"}]


def test_no_import_cycle_between_modules(graph):
    assert strongly_connected(graph) == []


def test_the_layers_contract_holds():
    from importlinter.application.use_cases import lint_imports
    from importlinter.configuration import configure

    configure()  # what the lint-imports command does first
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True) is True


def test_at_most_three_upward_imports_each_with_its_reason():
    ignored = [line for contract in CONTRACTS for line in contract.get("ignore_imports", [])]
    assert len(ignored) <= 3, ignored
    text = (ROOT / "pyproject.toml").read_text()
    for line in ignored:  # the line before each listed import says why it runs up
        before = text[:text.index(f'"{line}"')].rstrip().splitlines()[-1].strip()
        assert before.startswith("#") or before.endswith("["), line


def test_only_the_composition_root_resolves_a_method_by_its_name():
    callers = []
    for path in (ROOT / "privreid").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "get_method":
                callers.append(path.relative_to(ROOT).as_posix())
    assert set(callers) == {"privreid/composition.py"}, sorted(callers)
