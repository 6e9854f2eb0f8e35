"""Identifiers spell "defense" (the package is ``privreid.defenses``, the setting ``train.defenses``); the names
spelled "defence" before stay importable for one release, with a DeprecationWarning (issue 28, section 4)."""

import ast
import importlib
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "privreid"

#: the modules left at their old path, each making the renamed module its own (privreid.renamed.renamed_module)
OLD_MODULES = {"privreid.defenses.robust_defences": "privreid.defenses.robust_defenses",
               "privreid.attacks.inversion.defences": "privreid.attacks.inversion.defenses"}

#: (module, old name, new name): every public name that was spelled "defence"
OLD_NAMES = [
    ("privreid", "DEFENCES", "DEFENSES"),
    ("privreid", "Defence", "Defense"),
    ("privreid", "register_defence", "register_defense"),
    ("privreid", "available_defences", "available_defenses"),
    ("privreid", "get_defence", "get_defense"),
    ("privreid.defenses", "Defence", "Defense"),
    ("privreid.defenses", "DefenceLedger", "DefenseLedger"),
    ("privreid.defenses.registry", "Defence", "Defense"),
    ("privreid.defenses.registry", "DefenceLedger", "DefenseLedger"),
    ("privreid.defenses.registry", "DEFENCES", "DEFENSES"),
    ("privreid.defenses.registry", "defences", "defenses"),
    ("privreid.defenses.registry", "available_defences", "available_defenses"),
    ("privreid.defenses.registry", "get_defence", "get_defense"),
    ("privreid.defenses.registry", "enabled_defences", "enabled_defenses"),
    ("privreid.defenses.robust_defenses", "ServerDefence", "ServerDefense"),
    ("privreid.defenses.robust_defenses", "ServerDefenceLedger", "ServerDefenseLedger"),
    ("privreid.defenses.robust_defenses", "SERVER_DEFENCES", "SERVER_DEFENSES"),
    ("privreid.attacks.inversion", "Defence", "Defense"),
    ("privreid.attacks.inversion", "NO_DEFENCE", "NO_DEFENSE"),
    ("privreid.attacks.inversion", "defence_as_trained", "defense_as_trained"),
    ("privreid.attacks.inversion.defenses", "Defence", "Defense"),
    ("privreid.attacks.inversion.defenses", "NO_DEFENCE", "NO_DEFENSE"),
    ("privreid.attacks.inversion.defenses", "defence_as_trained", "defense_as_trained"),
    ("privreid.attacks.inversion.aggregate", "client_defence", "client_defense"),
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


def test_no_identifier_spells_defence():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if "defence" in name.lower() and name not in OLD_MODULES:
            found.append(f"{name} (module)")
        found += [f"{name}: {ident}" for ident in sorted(set(identifiers(ast.parse(path.read_text()))))
                  if "defence" in ident.lower()]
    assert found == []


def test_the_reader_sees_names_inside_f_strings():
    assert "defence" in set(identifiers(ast.parse('f"{defence.name}"')))


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
