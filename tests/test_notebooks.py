"""The notebooks in notebooks/ run top to bottom (nbclient), as a user would run them."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
#: the three longest (85-100 s each on 2 cores) run in `make test-all`, keeping `make test` under 15 minutes;
#: `make test` runs 04_audit
SLOW = {"01_quickstart.ipynb", "02_leakage.ipynb", "03_robustness.ipynb"}


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name in SLOW else [])
                                  for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVREID_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' tempfile.mkdtemp work dirs go with tmp_path
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code")

