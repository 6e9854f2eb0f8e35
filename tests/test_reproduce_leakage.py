"""L2RW+ Fig. 8: the subjects are fixed by the data (the same images for both models), the table reads the cached
inversions, and (slow) the whole figure runs at smoke scale."""

from __future__ import annotations

import json

import pytest
import torch

from privreid.data.types import ClientData
from privreid.errors import ConfigError
from privreid.experiments.reproduce import TABLES, run_table
from privreid.experiments.reproduce.leakage import subject_path


def _clients(*trains):
    return [ClientData(name=f"c{i}", domain="viA", train=train) for i, train in enumerate(trains)]


def test_the_subject_is_the_first_training_image_of_its_modality_whatever_the_clients():
    modality = {"b/v1.jpg": "visible", "a/i2.jpg": "infrared", "a/v3.jpg": "visible", "c/i0.jpg": "infrared",
                "a/test.jpg": "visible"}
    central = _clients([("b/v1.jpg", 0, 0), ("a/i2.jpg", 1, 1), ("a/v3.jpg", 2, 0), ("c/i0.jpg", 0, 1)])
    by_camera = _clients([("c/i0.jpg", 0, 1), ("a/i2.jpg", 0, 1)], [("b/v1.jpg", 0, 0), ("a/v3.jpg", 1, 0)])
    for clients in (central, by_camera):  # centralised (one pooled client) and cameras as clients: same images
        assert subject_path(clients, modality, "visible") == "a/v3.jpg"  # a/test.jpg is no training image
        assert subject_path(clients, modality, "infrared") == "a/i2.jpg"
    with pytest.raises(ConfigError, match="no infrared training image"):
        subject_path(_clients([("b/v1.jpg", 0, 0)]), modality, "infrared")
    with pytest.raises(ConfigError, match="modality must be one of"):
        subject_path(central, modality, "thermal")


def _inversion(run, modality, cosine, random_cosine, correct):
    run.mkdir(parents=True, exist_ok=True)
    (run / "summary.json").write_text("{}")
    scores = {"attack": {"mse": 0.1, "psnr": 10.0 + cosine, "ssim": cosine / 10, "feature_cosine": cosine},
              "random": {"mse": 0.2, "psnr": 7.0, "ssim": 0.001, "feature_cosine": random_cosine},
              "label_correct": correct}
    (run / f"inversion-{modality}.json").write_text(json.dumps({"subjects": [{"path": f"{modality}.jpg",
                                                                              **scores}]}))
    torch.save({"subject": torch.rand(3, 32, 16), "reconstruction": torch.rand(3, 32, 16)},
               run / f"inversion-{modality}.pt")


def test_fig8_table_reads_each_runs_inversions_in_the_papers_layout(tmp_path):
    """Rows are the subjects (and their random starts), columns each model's metrics; cosines with 3 decimals;
    no published numbers (the paper prints its cosines only inside the figure); figure.png drawn."""
    spec = TABLES["l2rw-fig8"]
    assert [r.measure for r in spec.rows] == [("inversion", "visible"), ("inversion-random", "visible"),
                                              ("inversion", "infrared"), ("inversion-random", "infrared")]
    for group, cosine in (("SYSU DNS", 0.75), ("SYSU Ours", 0.5)):
        for modality in ("visible", "infrared"):
            _inversion(tmp_path / "runs" / f"{group}-model", modality, cosine, -0.25, group == "SYSU DNS")
    rows = run_table("l2rw-fig8", scale="smoke", out=tmp_path, device="cpu", echo=lambda _: None)
    by = {(r["row"], r["column"]): r for r in rows}
    assert by[("Visible subject", "SYSU DNS cos")]["privreid"] == 0.75
    assert by[("Infrared subject", "SYSU Ours cos")]["privreid"] == 0.5
    assert by[("Infrared subject", "SYSU Ours PSNR")]["privreid"] == 10.5
    assert by[("Visible subject", "SYSU Ours SSIM")]["privreid"] == 0.05
    assert by[("Visible subject", "SYSU DNS label")]["privreid"] == 100.0
    assert by[("Visible subject", "SYSU Ours label")]["privreid"] == 0.0
    assert by[("Visible: random image", "SYSU Ours cos")]["privreid"] == -0.25
    assert by[("Visible: random image", "SYSU Ours label")]["privreid"] is None  # nothing inferred from noise
    assert all(r["published"] is None for r in rows)
    table = (tmp_path / "table.md").read_text()
    assert "| Method | SYSU DNS cos | SYSU DNS PSNR | SYSU DNS SSIM | SYSU DNS label | SYSU Ours cos |" in table
    assert "| Visible subject | 0.750 (-) | 10.8 (-) | 0.075 (-) | 100.0 (-) | 0.500 (-) |" in table
    assert "cosine similarities inside the figure's images only" in table
    assert (tmp_path / "figure.png").stat().st_size > 0


def test_fig8_is_listed_as_runnable():
    from privreid.experiments.reproduce import list_tables

    [fig8] = [t for t in list_tables() if t["table"] == "l2rw-fig8"]
    assert fig8["status"] == "runs" and "iDLG" in fig8["smoke"]


def test_fig8_runs_are_table9s_dns_stand_in_and_i_dppt():
    train = TABLES["l2rw-fig8"].rows[0].train
    table9 = TABLES["l2rw-table9"].rows[0].train
    assert all(train[g] == table9[g] for g in train)  # the same runs as Table IX's SYSU columns
    assert set(train) == {"SYSU DNS", "SYSU Ours"}
    assert train["SYSU DNS"]["smoke"].config().federation.method == "centralized"
    assert train["SYSU Ours"]["smoke"].config().federation.method == "dppt"
    assert train["SYSU DNS"]["paper"] is None  # DNS is not implemented: its paper-scale columns stay empty


@pytest.mark.slow
def test_fig8_smoke_end_to_end_inverts_the_same_images_for_both_models(tmp_path):
    from privreid.inversion.campaign import load_targets

    rows = run_table("l2rw-fig8", scale="smoke", out=tmp_path, device="cpu", echo=lambda _: None)
    runs = {g: tmp_path / "runs" / f"{g}-model" for g in ("SYSU DNS", "SYSU Ours")}
    for modality in ("visible", "infrared"):
        inverted = {g: json.loads((run / f"inversion-{modality}.json").read_text()) for g, run in runs.items()}
        [dns], [ours] = inverted["SYSU DNS"]["subjects"], inverted["SYSU Ours"]["subjects"]
        assert dns["path"] == ours["path"] and f"/{modality}/" in dns["path"]
        settings = inverted["SYSU Ours"]["settings"]
        assert [settings[k] for k in ("attack", "iterations", "lr", "threat")] == ["idlg", 200, 0.01, "full"]
        for group, run in runs.items():  # each model trained on the subject, through the client that holds it
            [target] = load_targets([run / "ckpt.pt"])
            held = {p for c in target.clients.values() for p, _, _ in c.train}
            assert dns["path"] in held
            cell = next(r for r in rows if r["row"] == f"{modality.capitalize()} subject"
                        and r["column"] == f"{group} cos")
            assert cell["privreid"] == round(inverted[group]["subjects"][0]["attack"]["feature_cosine"], 3)
    assert (tmp_path / "figure.png").stat().st_size > 0
