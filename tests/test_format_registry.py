"""The dataset-format registry: a user's own format registered from Python (docs/datasets.md's example, run as written),
the generated ``--help`` / docs tables, and the registration errors."""

import re
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from privreid.data.catalog import build_federation
from privreid.data.formats import (DatasetFormat, available_formats, detect_format, format_help, format_table,
                                   formats_markdown, load_dataset, register_format, unregister_format)
from privreid.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DATASETS_DOC = (ROOT / "docs" / "datasets.md").read_text()


def doc_section_code(title: str) -> str:
    section = DATASETS_DOC.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def make_mycams(root: Path) -> Path:
    """Two identities seen by cameras 1 and 2 in train, query and gallery."""
    for split in ("train", "query", "gallery"):
        for pid in (3, 8):
            for cam in ((1, 2) if split != "query" else (1,)):
                path = root / split / str(pid) / f"c{cam if split != 'gallery' else 3 - cam}_0.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.new("RGB", (8, 16), (pid * 20, cam * 40, 0)).save(path)
    return root


@pytest.fixture()
def mycams():
    namespace: dict = {}
    exec(doc_section_code("Use your own dataset"), namespace)  # registers "mycams"
    yield namespace
    unregister_format("mycams")


def test_docs_example_registers_a_format_that_auto_detection_and_the_cli_use(mycams, tmp_path):
    root = make_mycams(tmp_path / "site")
    assert "mycams" in available_formats() and detect_format(root) == "mycams"
    ds = load_dataset(root)
    assert ds.name == "mycams" and ds.root == str(root)
    assert sorted((pid, cam) for _, pid, cam in ds.train) == [(0, 0), (0, 1), (1, 0), (1, 1)]  # pids 3, 8 relabelled
    assert sorted((pid, cam) for _, pid, cam in ds.query) == [(3, 0), (8, 0)]
    assert load_dataset(root, "mycams").train == ds.train
    fed = build_federation([str(root)])
    assert [c.name for c in fed.clients] == ["site"] and len({pid for _, pid, _ in fed.clients[0].train}) == 2
    assert "user formats: mycams" in format_help()

    from privreid.cli import app

    result = CliRunner().invoke(app, ["data", "info", str(root)])
    assert result.exit_code == 0, result.output
    assert "== site" in result.output and "train" in result.output


def test_registration_errors(mycams):
    fmt = available_formats()["mycams"]
    with pytest.raises(ConfigError, match="already registered"):
        register_format(fmt)
    register_format(fmt, replace=True)
    with pytest.raises(ConfigError, match="invalid dataset format name 'auto'"):
        register_format(DatasetFormat("auto", "x", None, fmt.load))
    with pytest.raises(ConfigError, match="invalid dataset format name 'My Cams'"):
        register_format(DatasetFormat("My Cams", "x", None, fmt.load))
    with pytest.raises(ConfigError, match="takes a DatasetFormat"):
        register_format("mycams")


def test_unknown_format_lists_every_registered_spelling(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_dataset(tmp_path, "mars")
    for fmt in available_formats().values():
        assert all(spelling in str(err.value) for spelling in fmt.spellings)


def test_variants_come_from_the_name(tmp_path):
    from test_formats import make_cuhk

    root = make_cuhk(tmp_path)
    assert load_dataset(root, "cuhk03np-labeled").name == "cuhk03np-labeled"
    assert load_dataset(root, "cuhk03np").name == "cuhk03np-detected"
    with pytest.raises(ConfigError, match="already names a variant"):
        load_dataset(root, "cuhk03np-labeled", variant="detected")
    with pytest.raises(ConfigError, match="unknown dataset format 'regdb-x'"):
        load_dataset(root, "regdb-x")


def test_docs_tables_are_generated_from_the_registry():
    assert (ROOT / "docs" / "formats.md").read_text() == formats_markdown(), \
        "regenerate docs/formats.md with privreid.data.formats.formats_markdown()"
    assert format_table(("rgb",)) in DATASETS_DOC
    assert all(name in format_help() for name in available_formats())


def test_cli_format_help_is_generated_from_the_registry():
    from privreid.cli import app

    result = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "400"})
    flat = " ".join(result.output.replace("│", " ").split())
    assert " ".join(format_help().split()) in flat
