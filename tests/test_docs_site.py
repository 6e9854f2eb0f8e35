"""The documentation site builds in strict mode: a broken link, a page missing from the nav or an API object the
docstrings no longer have fails (``make docs``; needs the ``docs`` extra, which CI installs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strict_with_the_api_reference(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    api = (site / "api" / "index.html").read_text()
    for name in ("evaluate", "ReIDAdapter", "register_format", "train_run"):
        assert f'id="privreid.' in api and name in api, name
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")} - {"index"}
    assert all((site / page / "index.html").is_file() for page in pages)
