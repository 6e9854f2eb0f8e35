"""benchmarks/poisoning_table.py --smoke: the poisoning table of docs/poisoning.md runs and writes its cells."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark(monkeypatch):
    """benchmarks/poisoning_table.py imported by name from ``sys.path`` (a spawned process inherits the parent's
    path; pytest's ``syspath_prepend`` also imports pkg_resources, which recent setuptools no longer ship)."""
    monkeypatch.setattr(sys, "path", [str(BENCHMARKS), *sys.path])
    monkeypatch.delitem(sys.modules, "poisoning_table", raising=False)
    return importlib.import_module("poisoning_table")


@pytest.mark.slow
def test_smoke_table_has_a_cell_per_attack_and_defense_with_asr_for_backdoors_only(tiny_synth, tmp_path, monkeypatch):
    """Two cells at a time (``--jobs 2``: spawned processes, which import the benchmark by name)."""
    table = benchmark(monkeypatch)
    table.main(["--smoke", "--data", str(tiny_synth), "--out", str(tmp_path), "--jobs", "2"])
    cells = json.loads((tmp_path / "cells.json").read_text())
    columns = [*table.SMOKE_DEFENSES, table.CENTRAL]
    assert list(cells) == list(table.SMOKE_ATTACKS) and all(list(row) == columns for row in cells.values())
    for attack, row in cells.items():
        for cell in row.values():
            assert 0 <= cell["mAP"] <= 1
            assert ("asr" in cell) == (attack == "DBA") and 0 <= cell.get("asr", 0) <= 1
    # secure aggregation hides the uploads but sums the same ones: the plain mean's model
    assert cells["DBA"]["secure aggregation"]["mAP"] == pytest.approx(cells["DBA"]["plain FedPav"]["mAP"], abs=1e-4)
    # Krum keeps one upload of nine: it rejects the 7 honest clients but one, and both attackers or one of them
    detection = cells["DBA"]["Krum (f=2)"]["detection"]
    assert detection["defense"] == "robust-krum" and detection["fpr"] >= 6 / 7 and detection["tpr"] >= 0.5
    assert all("detection" not in cell for cell in cells["no attack"].values())  # no adversary, no positives
    assert cells["DBA"]["plain FedPav"]["asr_per_round"] == [cells["DBA"]["plain FedPav"]["asr"]]  # 1 round
    markdown = (tmp_path / "table.md").read_text().splitlines()
    assert markdown[0] == "| attack | " + " | ".join(columns) + " |" and markdown[4] == ""
    assert markdown[-1].startswith("Chance level (a uniformly random ranking): mAP ")
    assert markdown[2].startswith("| no attack | ") and " / —" in markdown[2] and " / —" not in markdown[3]
    first = markdown.index("Detection: TPR / FPR over the rounds, % (defenses that reject clients)")
    assert markdown[first + 2] == "| attack | Krum (f=2) |" and markdown[first + 4].startswith("| DBA | ")
    assert "ASR per evaluated round, %" in markdown
    assert not (tmp_path / "runs").exists()


def test_markdown_marks_cells_whose_features_were_not_finite(monkeypatch):
    table = benchmark(monkeypatch)
    cells = {"no attack": {"plain": {"mAP": 0.0671}, "median": {"mAP": 0.05, "non_finite": ["synthC"]}},
             "DBA": {"plain": {"mAP": 0.0649, "asr": 0.0357}, "median": {"mAP": 0.1, "asr": 1.0}}}
    assert table.markdown(cells).splitlines() == [
        "| attack | plain | median |", "|---|---|---|", "| no attack | 6.7 / — | 5.0† / — |",
        "| DBA | 6.5 / 4 | 10.0 / 100 |"]


def test_cells_over_seeds_are_mean_pm_std_with_failed_seeds_counted(monkeypatch):
    """mAP 0.10, 0.20, 0.30 over three seeds: mean 0.20, std 0.10 (ddof 1); ASR 1, 0, 1: mean 2/3, std 0.577;
    a seed that failed is counted, not averaged; one seed's cell stays as it was."""
    table = benchmark(monkeypatch)
    seeds = [{"mAP": 0.1, "asr": 1.0}, {"mAP": 0.2, "asr": 0.0}, {"mAP": 0.3, "asr": 1.0}, {"failed": "error: x"}]
    cell = table.over_seeds(seeds)
    assert (cell["n"], cell["failed"], cell["seeds"]) == (3, 1, seeds)
    assert cell["mAP"] == pytest.approx(0.2) and cell["mAP_std"] == pytest.approx(0.1)
    assert cell["asr"] == pytest.approx(2 / 3) and cell["asr_std"] == pytest.approx(3 ** -0.5)
    assert cell["mAP_ci95_low"] == pytest.approx(0.2 - 4.302653 * 0.1 / 3 ** 0.5)
    assert table.over_seeds(seeds[:1]) == seeds[0]
    plain = table.over_seeds([{"mAP": 0.5}, {"mAP": 0.7}])
    assert "asr" not in plain and plain["mAP_std"] == pytest.approx(0.2 ** 0.5 / 10 ** 0.5 * 1)
    assert table.markdown({"DBA": {"plain": cell, "median": table.over_seeds([{"failed": "e"}, {"failed": "e"}])},
                           "no attack": {"plain": plain, "median": {"mAP": 0.05}}}).splitlines()[2:] == [
        "| DBA | 20.0 ± 10.0 / 67 ± 58 (1 failed) | failed |", "| no attack | 60.0 ± 14.1 / — | 5.0 / — |"]


def test_markdown_adds_detection_and_asr_per_round_tables_where_cells_have_them(monkeypatch):
    """Only the columns and rows with a detection record / an ASR curve appear in those tables; the ASR on the
    gallery without the attacker's images stands in brackets."""
    table = benchmark(monkeypatch)
    cells = {"ALIE": {"plain": {"mAP": 0.1}, "Krum": {"mAP": 0.1, "detection": {"defense": "robust-krum", "tpr": 1.0,
                                                                                  "fpr": 0.25}}},
             "backdoor": {"plain": {"mAP": 0.2, "asr": 0.5, "asr_clean_gallery": 0.25, "asr_per_round": [0.0, 0.5]},
                          "Krum": {"mAP": 0.2, "asr": 0.0, "detection": {"defense": "robust-krum", "tpr": None,
                                                                          "fpr": 0.0}}}}
    assert table.markdown(cells).splitlines() == [
        "| attack | plain | Krum |", "|---|---|---|", "| ALIE | 10.0 / — | 10.0 / — |",
        "| backdoor | 20.0 / 50 [25] | 20.0 / 0 |", "",
        "Detection: TPR / FPR over the rounds, % (defenses that reject clients)", "", "| attack | Krum |", "|---|---|",
        "| ALIE | 100 / 25 |", "| backdoor | — / 0 |", "", "ASR per evaluated round, %", "", "| attack | plain |",
        "|---|---|", "| backdoor | 0 50 |"]
