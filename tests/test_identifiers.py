"""Identifiers spell "defense" (the package is ``privreid.defenses``, the setting ``train.defenses``); the names
spelled "defense" before stay importable for one release, with a DeprecationWarning (issue 28, section 4)."""

import ast
import importlib
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "privreid"

#: the modules left at their old path, each making the renamed module its own (privreid.renamed.renamed_module)
OLD_MODULES = {"privreid.defenses.robust_defenses": "privreid.defenses.robust.plugin",
               "privreid.inversion.defenses": "privreid.inversion.defenses"}

#: (module, old name, new name): every public name that was spelled "defense"
OLD_NAMES = [
    ("privreid", "DEFENSES", "DEFENSES"),
    ("privreid", "Defense", "Defense"),
    ("privreid", "register_defense", "register_defense"),
    ("privreid", "available_defenses", "available_defenses"),
    ("privreid", "get_defense", "get_defense"),
    ("privreid.defenses", "Defense", "Defense"),
    ("privreid.defenses", "DefenseLedger", "DefenseLedger"),
    ("privreid.defenses.registry", "Defense", "Defense"),
    ("privreid.defenses.registry", "DefenseLedger", "DefenseLedger"),
    ("privreid.defenses.registry", "DEFENSES", "DEFENSES"),
    ("privreid.defenses.registry", "defenses", "defenses"),
    ("privreid.defenses.registry", "available_defenses", "available_defenses"),
    ("privreid.defenses.registry", "get_defense", "get_defense"),
    ("privreid.defenses.registry", "enabled_defenses", "enabled_defenses"),
    ("privreid.defenses.robust.plugin", "ServerDefense", "ServerDefense"),
    ("privreid.defenses.robust.plugin", "ServerDefenseLedger", "ServerDefenseLedger"),
    ("privreid.defenses.robust.plugin", "SERVER_DEFENSES", "SERVER_DEFENSES"),
    ("privreid.inversion", "Defense", "Defense"),
    ("privreid.inversion", "NO_DEFENSE", "NO_DEFENSE"),
    ("privreid.inversion", "defense_as_trained", "defense_as_trained"),
    ("privreid.inversion.defenses", "Defense", "Defense"),
    ("privreid.inversion.defenses", "NO_DEFENSE", "NO_DEFENSE"),
    ("privreid.inversion.defenses", "defense_as_trained", "defense_as_trained"),
    ("privreid.inversion.aggregate", "client_defense", "client_defense"),
]


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


def test_no_identifier_spells_defense():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if "defense" in name.lower() and name not in OLD_MODULES:
            found.append(f"{name} (module)")
        found += [f"{name}: {ident}" for ident in sorted(set(identifiers(ast.parse(path.read_text()))))
                  if "defense" in ident.lower()]
    assert found == []


def test_the_reader_sees_names_inside_f_strings():
    assert "defense" in set(identifiers(ast.parse('f"{defense.name}"')))


@pytest.mark.parametrize("module, old, new", OLD_NAMES, ids=[f"{m}.{o}" for m, o, _ in OLD_NAMES])
def test_an_old_name_is_the_new_one_with_a_deprecation_warning(module, old, new):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{old} is renamed {new}"):
        assert getattr(mod, old) is getattr(mod, new)


@pytest.mark.parametrize("old, new", sorted(OLD_MODULES.items()))
def test_an_old_module_path_is_the_renamed_module(monkeypatch, old, new):
    renamed = importlib.import_module(new)
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported afresh, as a user's first import would
    with pytest.warns(DeprecationWarning, match=f"{old} is renamed {new}"):
        assert importlib.import_module(old) is renamed
