"""The small DG benchmarks' evaluation protocols (privreid.evaluation.dg_protocol), hand-checked, and
`privreid eval --format` end to end."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from privreid.cli import app
from privreid.data.formats.dg.splits import DGSplit
from privreid.evaluation.dg_protocol import rank_per_query_galleries, rank_splits, resolve_eval_format
from privreid.errors import ConfigError

from test_dg_formats import make_caviar, make_cuhksysu, make_viper

runner = CliRunner()


def _f(**points):
    return {name: np.array([value], dtype=np.float32) for name, value in points.items()}


def test_rank_splits_mean_and_std_by_hand():
    features = _f(q1=0.0, q2=10.0, g1=1.0, g2=11.0, p1=0.0, p2=1.2, h2=1.0, d=2.0, h1=3.0)
    perfect = DGSplit(0, 0, "dg", [], [1, 2], [("q1", 1, 0), ("q2", 2, 0)], [("g1", 1, 1), ("g2", 2, 1)])
    # p1 ranks h2 (d=1), d (4), h1 (9): first match at rank 3, AP 1/3; p2 ranks h2 first: AP 1
    harder = DGSplit(1, 0, "dg", [], [1, 2], [("p1", 1, 0), ("p2", 2, 0)],
                     [("h2", 2, 1), ("d", 0, 1), ("h1", 1, 1)])
    result = rank_splits(features, [perfect, harder])
    assert [r["rank1"] for r in result["per_split"]] == [1.0, 0.5]
    assert result["rank1"] == pytest.approx(0.75) and result["std"]["rank1"] == pytest.approx(0.25)
    assert result["mAP"] == pytest.approx(5 / 6) and result["std"]["mAP"] == pytest.approx(1 / 6)
    assert result["rank5"] == 1.0 and result["splits"] == 2


def test_per_query_galleries_by_hand():
    features = _f(q1=0.0, a=2.0, b=1.0, q2=5.0, c=5.1, q3=9.0)
    pairs = [(("q1", 1, 0), [("a", 1, 0), ("b", 3, 0)]),   # b first: rank 2, AP 1/2
             (("q2", 2, 0), [("c", 2, 0), ("a", 1, 0)]),   # c first: AP 1
             (("q3", 4, 0), [("a", 1, 0)])]                # no match: not counted
    result = rank_per_query_galleries(features, pairs)
    assert result["rank1"] == pytest.approx(0.5) and result["mAP"] == pytest.approx(0.75)
    assert (result["num_valid_queries"], result["num_queries"]) == (2, 3)


def test_eval_formats():
    assert resolve_eval_format("prid") == ("prid", "dg")
    assert resolve_eval_format("grid-crosscam") == ("grid", "crosscam")
    assert resolve_eval_format("cuhksysu") == ("cuhksysu", "fixed")  # FedReID's 2,900 queries, no distractors
    assert resolve_eval_format("cuhksysu-g100") == ("cuhksysu", "g100")
    assert resolve_eval_format("cuhk01") == ("cuhk01", "crosscam")  # torchreid / FedPav: all images of both views
    with pytest.raises(ConfigError, match="not a small DG benchmark format"):
        resolve_eval_format("market1501")


@pytest.fixture(scope="module")
def checkpoint(tiny_synth, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    res = runner.invoke(app, ["train", "--method", "centralized", "--rounds", "1", "--data", str(tiny_synth),
                              "--height", "32", "--width", "16", "--feat-dim", "16", "--batch-size", "8",
                              "--max-steps", "1", "--eval-every", "5", "--device", "cpu", "--quiet",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out / "ckpt.pt"


def test_eval_format_viper_writes_and_reuses_its_splits(checkpoint, tmp_path):
    root = make_viper(tmp_path / "data", n=12)
    res = runner.invoke(app, ["eval", "--model", str(checkpoint), "--data", str(root), "--format", "viper",
                              "--num-splits", "3", "--seed", "5", "--device", "cpu", "--json",
                              str(tmp_path / "out.json")])
    assert res.exit_code == 0, res.output
    assert "mean (std) over 3 split(s), seed 5" in res.output
    [row] = json.loads((tmp_path / "out.json").read_text())
    assert row["protocol"] == "dg" and len(row["per_split"]) == 3
    assert row["rank1"] == pytest.approx(np.mean([s["rank1"] for s in row["per_split"]]))
    written = tmp_path / "out-data-splits.json"
    assert [len(s["query"]) for s in json.loads(written.read_text())["splits"]] == [6, 6, 6]
    again = runner.invoke(app, ["eval", "--model", str(checkpoint), "--data", str(root), "--format", "viper",
                                "--splits", str(written), "--device", "cpu", "--json", str(tmp_path / "b.json")])
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "b.json").read_text())[0]["per_split"] == row["per_split"]


def test_eval_format_crosscam(checkpoint, tmp_path):
    res = runner.invoke(app, ["eval", "--model", str(checkpoint), "--data", str(make_caviar(tmp_path)),
                              "--format", "caviar-crosscam", "--device", "cpu", "--num-splits", "2"])
    assert res.exit_code == 0, res.output
    assert "(crosscam)" in res.output


@pytest.mark.parametrize("args,message", [
    (["--format", "viper"], "--format viper needs --data ROOT"),
    (["--format", "prid", "--data", "{missing}"], "does not exist; prid expects root/prid_2011/single_shot"),
    (["--format", "grid", "--data", "{empty}"], "is not in the grid layout; expected root/underground_reid"),
    (["--format", "viper", "--data", "{empty}", "--mode", "ir-to-visible"], "do not apply"),
])
def test_eval_format_bad_input_one_line_exit_2(checkpoint, tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    args = [a.format(missing=tmp_path / "missing", empty=tmp_path / "empty") for a in args]
    res = runner.invoke(app, ["eval", "--model", str(checkpoint), "--device", "cpu", *args])
    assert res.exit_code == 2
    assert message in res.output and res.output.count("\n") == 1


def test_eval_format_cuhksysu_ranks_the_fixed_query_set_against_one_gallery(checkpoint, tmp_path):
    """FedReID's CUHK-SYSU test (paper 002 Table I): the queries against their persons' gallery crops only."""
    root = make_cuhksysu(tmp_path / "data")
    res = runner.invoke(app, ["eval", "--model", str(checkpoint), "--data", str(root), "--format", "cuhksysu",
                              "--device", "cpu", "--json", str(tmp_path / "out.json")])
    assert res.exit_code == 0, res.output
    [row] = json.loads((tmp_path / "out.json").read_text())
    assert row["protocol"] == "fixed" and (row["num_query"], row["num_gallery"]) == (3, 3)
    assert "ranked against one gallery" in res.output
    g100 = runner.invoke(app, ["eval", "--model", str(checkpoint), "--data", str(root), "--format", "cuhksysu-g100",
                               "--device", "cpu"])
    assert g100.exit_code == 0, g100.output
    assert "(g100)" in g100.output and "each ranked against its own gallery" in g100.output


@pytest.fixture(scope="module")
def flip_cosine_run(tiny_synth, tmp_path_factory):
    out = tmp_path_factory.mktemp("flip-cosine")
    res = runner.invoke(app, ["train", "--method", "centralized", "--rounds", "1", "--data", str(tiny_synth),
                              "--height", "32", "--width", "16", "--feat-dim", "16", "--batch-size", "8",
                              "--max-steps", "1", "--eval-every", "5", "--device", "cpu", "--quiet",
                              "--eval-flip", "--eval-metric", "cosine", "--eval-ap", "devkit", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_reproduce_unseen_domain_cells_rank_as_the_run_does(flip_cosine_run, tmp_path):
    """`privreid reproduce`'s DG cells (SKA Table 4's unseen columns) use the run's evaluation.flip,
    eval_metric and eval_ap, like its seen-domain cells; before, they ranked plain Euclidean features."""
    from privreid.experiments import reproduce
    from privreid.checkpoint import Checkpoint
    from privreid.evaluation.dg_protocol import evaluate_dg_model

    rng = np.random.default_rng(0)
    for path in sorted((make_viper(tmp_path / "data" / "viper", n=12)).rglob("*.bmp")):  # distinct features
        Image.fromarray(rng.integers(0, 256, (32, 16, 3), dtype=np.uint8)).save(path)
    result = reproduce._evaluate_dg(flip_cosine_run, "viper", "viper", "paper", tmp_path / "data", "cpu", "viper")
    assert result["evaluation"] == {"metric": "cosine", "flip": True, "ap": "devkit"}
    model = Checkpoint.load(flip_cosine_run / "ckpt.pt").load_model()
    ranked = {settings: evaluate_dg_model(model, tmp_path / "data" / "viper", "viper", height=32, width=16,
                                          flip=settings[0], metric=settings[1], ap=settings[2])["per_split"]
              for settings in ((True, "cosine", "devkit"), (False, "euclidean", "torchreid"))}
    assert result["per_split"] == ranked[(True, "cosine", "devkit")] != ranked[(False, "euclidean", "torchreid")]


def test_reproduce_recomputes_a_dg_cache_ranked_otherwise_than_the_run(flip_cosine_run, tmp_path):
    """An eval-<dataset>.json written before the DG cells followed the run's settings is not reused."""
    from privreid.experiments import reproduce

    make_viper(tmp_path / "data" / "viper", n=12)
    summary = json.loads((flip_cosine_run / "summary.json").read_text())
    assert summary["evaluation"] == {"metric": "cosine", "flip": True, "ap": "devkit"}
    run = shutil.copytree(flip_cosine_run, tmp_path / "run")
    cache = run / "eval-viper.json"
    cache.write_text(json.dumps({"protocol": "dg", "rank1": 2.0, "evaluation": {"metric": "euclidean",
                                                                                 "flip": False}}))
    args = (run, summary, "viper", "viper", "paper", tmp_path / "data", "cpu", "viper")
    fresh = reproduce._cached_dg_evaluation(*args)
    assert fresh["evaluation"] == summary["evaluation"] and fresh["rank1"] <= 1.0
    assert json.loads(cache.read_text()) == fresh
    cache.write_text(json.dumps({**fresh, "rank1": 2.0}))  # ranked as the run: reused
    assert reproduce._cached_dg_evaluation(*args)["rank1"] == 2.0
