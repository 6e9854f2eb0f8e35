"""The CLI is thin (issue 12.7): ``privreid/cli.py`` only registers one module per command, no module of the
package imports ``privreid.cli``, and the attack campaign and the eval dispatch live in the library."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "privreid"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # resolve a relative import against the module's package
                parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)[:-node.level]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_module_imports_the_cli():
    importers = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                 if p.name != "__main__.py" and p != PACKAGE / "cli.py" and "privreid.cli" in _imports(p)]
    assert importers == []


def test_cli_module_only_registers_commands():
    tree = ast.parse((PACKAGE / "cli.py").read_text())
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert functions == ["_version", "main"]  # the --version flag and the group callback
    registered = {p.stem for p in (PACKAGE / "commands").glob("*.py")} - {"__init__", "common", "options"}  # helpers, not commands
    imported = {n.module.split(".")[-1] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module
                and n.module.startswith("privreid.commands.") and n.module != "privreid.commands.common"}
    assert imported == registered


def test_the_attack_campaign_lives_once_in_the_library():
    for module in ("commands/attack.py", "reporting/suite.py"):
        text = (PACKAGE / module).read_text()
        assert "evaluate_under_attack(" not in text and "attack_" in text
