"""The frontier (privreid.experiments.frontier): the Pareto front of a hand-made point set, and the files."""

from __future__ import annotations

import csv
import json

from privreid.experiments.frontier import higher_is_better, pareto_front, setting, write_frontier
from privreid.experiments.statistics import describe


def test_pareto_front_of_a_hand_made_point_set():
    """x = epsilon (lower is better), y = mAP (higher is better): A (1, .5), B (2, .6), C (2, .4), D (3, .7).
    A beats C on both axes (as does B: the same epsilon, more mAP); A, B, D each win on one axis: the front."""
    points = [(1.0, 0.5), (2.0, 0.6), (2.0, 0.4), (3.0, 0.7)]
    assert pareto_front(points, x_higher=False, y_higher=True) == [True, True, False, True]
    # both axes better higher (mAP under PGD against mAP): only D is undominated
    assert pareto_front(points, x_higher=True, y_higher=True) == [False, False, False, True]
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)], x_higher=True, y_higher=True) == [True, True]  # ties stay


def test_which_measures_are_better_higher():
    assert all(map(higher_is_better, ["global_seen.mAP", "unseen R1", "PGD mAP", "rank1", "seen mAP"]))
    assert not any(map(higher_is_better, ["epsilon", "inversion PSNR", "feature_cosine", "membership.tpr_at_1pct",
                                          "backdoor ASR", "asr", "ssim"]))


def _row(beta, maps, eps, failed=0):
    return {"privacy.beta": beta, **describe(maps, "mAP"), **describe(eps, "epsilon"), "failed": failed}


def test_write_frontier_writes_csv_json_and_one_figure_per_pair_with_failed_cells_marked(tmp_path):
    rows = [_row(0.0, [0.50, 0.54, 0.52], [8.0, 8.0, 8.0]), _row(0.1, [0.40, 0.42], [2.0, 2.2], failed=1),
            _row(1.0, [0.30, 0.28, 0.29], [4.0, 4.0, 4.0]), _row(10.0, [], [], failed=3)]
    assert setting(rows[1]) == "beta=0.1"
    files = write_frontier(rows, tmp_path, utility=["mAP"], privacy=["epsilon", "psnr"])
    assert [f.name for f in files] == ["frontier.json", "frontier.csv", "frontier-mAP-vs-epsilon.png"]
    assert (tmp_path / "frontier-mAP-vs-epsilon.png").stat().st_size > 0  # no psnr in any cell: no figure
    data = json.loads((tmp_path / "frontier.json").read_text())
    [pair] = data["pairs"]
    by = {p["setting"]: p for p in pair["points"]}
    assert by["beta=0.0"]["pareto"] and by["beta=0.1"]["pareto"]  # most mAP; least epsilon
    assert by["beta=1.0"]["pareto"] is False  # more epsilon and less mAP than beta=0.1
    assert by["beta=10.0"]["pareto"] is None and by["beta=10.0"]["failed"] == 3
    assert by["beta=0.1"]["failed"] == 1 and by["beta=0.1"]["y_n"] == 2
    with (tmp_path / "frontier.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 4 and table[0]["utility"] == "mAP" and table[0]["privacy"] == "epsilon"
