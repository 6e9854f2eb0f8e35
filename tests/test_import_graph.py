"""Which modules may import which (docs/architecture.md): read from the sources with ``ast``, nothing imported."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "privreid"


def module_name(path: Path) -> str:
    """``privreid.a.b`` for ``privreid/a/b.py`` (``privreid.a`` for ``privreid/a/__init__.py``)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function, relative imports resolved.

    ``from X import Y`` counts as both ``X`` and ``X.Y`` (``Y`` may be a submodule).
    """
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])]) \
                if node.level else node.module
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def modules_under(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def importers(folder: str, target: str) -> list[str]:
    """The modules under ``folder`` that import ``target`` or a module below it."""
    return [module_name(path) for path in modules_under(folder)
            if any(m == target or m.startswith(target + ".") for m in imported_modules(path))]


def test_the_reader_resolves_relative_imports():
    path = PACKAGE / "federated" / "methods" / "fedpav_variants.py"
    found = imported_modules(path)
    assert {"privreid.federated.strategy", "privreid.config", "privreid.federated.methods.fedpav", "torch"} <= found
    assert importers("federated/methods", "privreid.federated.registry")  # every method registers itself


def test_no_method_imports_the_composition_root():
    """A method gets what it needs (the clients' model config) from its factory's arguments, never from
    ``training/compose.py``, which composes methods with defenses (issue 28, section 4)."""
    assert modules_under("federated/methods")
    assert importers("federated/methods", "privreid.training.compose") == []


def engine_names(folder: str) -> dict[str, set[str]]:
    """``{module: names it imports from privreid.federated.engine}`` for the modules under ``folder``."""
    out = {}
    for path in modules_under(folder):
        names = {m.rpartition(".")[2] for m in imported_modules(path) if m.startswith("privreid.federated.engine.")}
        if names or "privreid.federated.engine" in imported_modules(path):
            out[module_name(path)] = names
    return out


def test_evaluation_attacks_and_audits_go_through_the_engine_only_where_docs_say():
    """docs/architecture.md, "Layers": evaluation, corruptions and reporting never import the engine; attacks read
    only its client-selection rule; the audits that train (server views' replay, LiRA shadows, DP-audit canary
    runs) run it."""
    for folder in ("evaluation", "corruptions", "reporting"):
        assert engine_names(folder) == {}, folder
        assert importers(folder, "privreid.training.compose") == [], folder
    assert engine_names("attacks") == {"privreid.inversion.aggregate": {"selection_size"}}
    assert set(engine_names("auditing")) == {"privreid.auditing.views", "privreid.auditing.shadows",
                                             "privreid.auditing.dp_audit"}


def test_only_the_composition_root_composes_defenses_and_the_cli_names_only_what_docs_say():
    """docs/architecture.md, "Layers": training composes defenses only in training/compose.py; the CLI and the
    Flower apps import from privreid.defenses only the support matrix, the enabled defenses' ledger keys and
    secure aggregation's transport checks."""
    composers = [module_name(p) for p in PACKAGE.rglob("*.py") if "privreid.defenses.apply_defenses"
                 in imported_modules(p) and not module_name(p).startswith("privreid.defenses")]
    assert composers == ["privreid.training.compose"]
    named = {}
    for folder in ("commands", "flower", "secagg"):
        for path in modules_under(folder):
            names = sorted(m for m in imported_modules(path) if m.startswith("privreid.defenses."))
            if names:
                named[module_name(path)] = names
    assert named == {
        "privreid.commands.flower": ["privreid.defenses.secure_aggregation.mechanism",
                                     "privreid.defenses.secure_aggregation.mechanism.check_secure_aggregation"],
        "privreid.commands.methods": ["privreid.defenses.registry", "privreid.defenses.registry.defenses"],
        "privreid.flower.messages": ["privreid.defenses.registry", "privreid.defenses.registry.enabled_defenses"],
        "privreid.defenses.secure_aggregation.flower": ["privreid.defenses.secure_aggregation.mechanism",
                                   "privreid.defenses.secure_aggregation.mechanism.AggregatedUpload",
                                   "privreid.defenses.secure_aggregation.mechanism.round_parameters"],
    }
