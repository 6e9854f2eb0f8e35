"""benchmarks/poisoning_table.py --smoke: the poisoning table of docs/poisoning.md runs and writes its cells."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "poisoning_table.py"


@pytest.mark.slow
def test_smoke_table_has_a_cell_per_attack_and_defence_with_asr_for_backdoors_only(tiny_synth, tmp_path):
    spec = importlib.util.spec_from_file_location("poisoning_table", BENCHMARK)
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    table.main(["--smoke", "--data", str(tiny_synth), "--out", str(tmp_path)])
    cells = json.loads((tmp_path / "cells.json").read_text())
    columns = [*table.SMOKE_DEFENCES, table.CENTRAL]
    assert list(cells) == list(table.SMOKE_ATTACKS) and all(list(row) == columns for row in cells.values())
    for attack, row in cells.items():
        for cell in row.values():
            assert 0 <= cell["mAP"] <= 1
            assert ("asr" in cell) == (attack == "DBA") and 0 <= cell.get("asr", 0) <= 1
    # secure aggregation hides the uploads but sums the same ones: the plain mean's model
    assert cells["DBA"]["secure aggregation"]["mAP"] == pytest.approx(cells["DBA"]["plain FedPav"]["mAP"], abs=1e-4)
    markdown = (tmp_path / "table.md").read_text().splitlines()
    assert markdown[0] == "| attack | " + " | ".join(columns) + " |" and len(markdown) == 2 + len(cells)
    assert markdown[2].startswith("| no attack | ") and " / —" in markdown[2] and " / —" not in markdown[3]
    assert not (tmp_path / "runs").exists()
