"""One spelling, "defense", in identifiers and file names (issue 38, step 8); the names spelled "defence" during
development are gone, not aliased: privreid has never been released (issue 38, step 11)."""

import ast
import importlib
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "privreid"
REPO = PACKAGE.parent

#: (module, name) spelled "defence" during development: each is an AttributeError now
DEVELOPMENT_NAMES = [("privreid", "DEFENCES"), ("privreid", "Defence"), ("privreid", "register_defence"),
                     ("privreid.defenses", "Defence"), ("privreid.defenses.registry", "DefenceLedger"),
                     ("privreid.inversion", "NO_DEFENCE"), ("privreid.inversion.defenses", "defence_as_trained")]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def identifiers(tree: ast.AST):
    """Every name the code spells: variables, attributes, definitions, arguments, keywords, imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.arg):
            yield node.arg
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.arg
        elif isinstance(node, ast.alias):
            yield from filter(None, (node.name, node.asname))
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_no_identifier_or_module_spells_defence():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if "defence" in name.lower():
            found.append(f"{name} (module)")
        found += [f"{name}: {ident}" for ident in sorted(set(identifiers(ast.parse(path.read_text()))))
                  if "defence" in ident.lower()]
    assert found == []


def test_no_tracked_file_name_spells_defence():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    assert files, "not a git checkout"
    assert [f for f in files if "defence" in f.lower()] == []


def test_the_reader_sees_names_inside_f_strings():
    assert "defense" in set(identifiers(ast.parse('f"{defense.name}"')))


@pytest.mark.parametrize("module, old", DEVELOPMENT_NAMES, ids=[f"{m}.{o}" for m, o in DEVELOPMENT_NAMES])
def test_a_development_spelling_is_no_name(module, old):
    with pytest.raises(AttributeError):
        getattr(importlib.import_module(module), old)


@pytest.mark.parametrize("old", ["privreid.renamed", "privreid.defenses.robust_defences", "privreid.inversion.defences",
                                 "privreid.attacks", "privreid.adversaries", "privreid.secagg", "privreid.sweep",
                                 "privreid.reproduce", "privreid.data.formats_dg", "privreid.data.formats_vi"])
def test_a_development_module_path_is_no_module(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
