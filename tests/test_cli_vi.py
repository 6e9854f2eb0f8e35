"""`privreid eval` on visible-infrared and video data: both modes, --seq-len, and the VI-only option errors."""

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from privreid.checkpoint import load_model
from privreid.cli import app
from privreid.data import INFRARED, VISIBLE
from privreid.data.catalog import resolve_datasets
from privreid.data.partition import as_test_set
from privreid.data.synthetic_vi import SynthVIConfig, generate_synthetic_vi
from privreid.evaluation.model_eval import evaluate_model

runner = CliRunner()
TINY_VI = SynthVIConfig(ids_per_entity=6, test_ids_per_entity=4, height=32, width=16)
TINY_VIDEO = replace(TINY_VI, num_entities=1, video=True, frames_per_tracklet=3, shots_per_id_per_cam=1)


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def vi_run(tmp_path_factory):
    """A tiny VI dataset and one centralised round on it (ES protocol, entity viC held out): (data, run dir)."""
    tmp = tmp_path_factory.mktemp("cli_vi")
    data = generate_synthetic_vi(tmp / "vi", TINY_VI)
    res = invoke("train", "--method", "centralized", "--protocol", "es", "--rounds", 1, "--data", data,
                 "--test-domains", "viC", "--height", 32, "--width", 16, "--feat-dim", 32, "--batch-size", 8,
                 "--max-steps", 2, "--device", "cpu", "--quiet", "--out", tmp / "run")
    assert res.exit_code == 0, res.output
    return data, tmp / "run"


def valid_queries(query, gallery):
    """Queries with a positive left after the Market-1501 rule (same identity on the same camera dropped)."""
    return sum(any(gp == qp and gc != qc for _, gp, gc in gallery) for _, qp, qc in query)


def test_eval_ranks_both_modes_of_the_unseen_entity(vi_run, tmp_path):
    data, run = vi_run
    rows = {}
    for mode in ("ir-to-visible", "visible-to-ir"):
        out = tmp_path / f"{mode}.json"
        res = invoke("eval", "--model", run / "ckpt.pt", "--domains", "viC", "--mode", mode, "--device", "cpu",
                     "--json", out)
        assert res.exit_code == 0, res.output
        assert f"viC ({mode})" in res.output
        [rows[mode]] = json.loads(out.read_text())
        assert rows[mode]["testset"] == "viC" and rows[mode]["mode"] == mode
    # the default mode is the one the run evaluated: eval reproduces the logged unseen numbers
    summary = json.loads((run / "summary.json").read_text())
    assert rows["ir-to-visible"]["mAP"] == pytest.approx(summary["global_unseen"]["mAP"], abs=1e-6)
    res = invoke("eval", "--model", run / "ckpt.pt", "--domains", "viC", "--device", "cpu", "--json",
                 tmp_path / "default.json")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "default.json").read_text())[0] == rows["ir-to-visible"]
    # each mode queries one modality against the other: counts from the dataset itself
    ds = resolve_datasets([str(data)])["viC"]
    infrared = [s for s in ds.query if ds.modality[s[0]] == INFRARED]
    visible = [s for s in ds.gallery if ds.modality[s[0]] == VISIBLE]
    assert rows["ir-to-visible"]["num_valid_queries"] == valid_queries(infrared, visible)
    assert rows["visible-to-ir"]["num_valid_queries"] == valid_queries(visible, infrared)
    # and the numbers are the library's for that mode
    expected = evaluate_model(load_model(run / "ckpt.pt"), as_test_set("viC", ds), height=32, width=16,
                                             mode="visible-to-ir")
    for key in ("rank1", "rank5", "rank10", "rank20", "mAP", "mINP"):
        assert rows["visible-to-ir"][key] == pytest.approx(expected[key], abs=1e-6)


def test_eval_video_tracklets_with_seq_len(vi_run, tmp_path):
    _, run = vi_run
    video = generate_synthetic_vi(tmp_path / "video", TINY_VIDEO)

    def evaluate(seq_len):
        out = tmp_path / f"seq{seq_len}.json"
        res = invoke("eval", "--model", run / "ckpt.pt", "--data", video, "--seq-len", seq_len, "--device", "cpu",
                     "--json", out)
        assert res.exit_code == 0, res.output
        [row] = json.loads(out.read_text())
        return row

    one, three, six = evaluate(1), evaluate(3), evaluate(6)
    assert one["testset"] == "vidA" and one["mode"] == "ir-to-visible" and 0.0 < one["mAP"] <= 1.0
    # 6 evenly spaced frames of a 3-frame tracklet take every frame twice: the same temporal mean as 3
    for key in ("rank1", "mAP", "mINP"):
        assert six[key] == pytest.approx(three[key], abs=1e-6)
    ds = resolve_datasets([str(video)])["vidA"]
    expected = evaluate_model(load_model(run / "ckpt.pt"), as_test_set("vidA", ds), height=32, width=16,
                                             seq_len=1)
    assert one["mAP"] == pytest.approx(expected["mAP"], abs=1e-6)
    res = invoke("eval", "--model", run / "ckpt.pt", "--data", video, "--corruption", "noise", "--device", "cpu")
    assert res.exit_code == 2 and "--corruption corrupts images; vidA holds video tracklets" in res.output


@pytest.mark.parametrize("extra, message", [
    (["--mode", "visible-to-ir"], "--mode applies to visible-infrared data only; synthA has no modality map"),
    (["--seq-len", "4"], "--seq-len applies to video data only; synthA holds images"),
])
def test_vi_options_on_rgb_data_exit_2(vi_run, tiny_synth, extra, message):
    _, run = vi_run
    res = invoke("eval", "--model", run / "ckpt.pt", "--data", tiny_synth, "--domains", "synthA", "--device", "cpu",
                 *extra)
    assert res.exit_code == 2 and message in res.output


@pytest.mark.parametrize("extra, message", [
    (["--mode", "rgb-to-ir"], "--mode must be one of ir-to-visible, visible-to-ir, got 'rgb-to-ir'"),
    (["--seq-len", "0"], "--seq-len must be at least 1, got 0"),
    (["--mode", "ir-to-visible", "--corruption", "noise"], "--mode and --seq-len do not combine with --corruption"),
    (["--seq-len", "2"], "--seq-len applies to video data only; viC holds images"),
    (["--single-gallery-shot"], "--single-gallery-shot is the CUHK03 protocol; viC is visible-infrared"),
])
def test_bad_vi_options_exit_2(vi_run, extra, message):
    _, run = vi_run
    res = invoke("eval", "--model", run / "ckpt.pt", "--domains", "viC", "--device", "cpu", *extra)
    assert res.exit_code == 2 and message in res.output


def test_bad_mode_is_refused_before_the_checkpoint_is_read(tmp_path):
    res = invoke("eval", "--model", tmp_path / "missing.pt", "--mode", "both")
    assert res.exit_code == 2 and "--mode must be one of" in res.output
