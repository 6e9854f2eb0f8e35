"""End-to-end CLI tests on a tiny synthetic federation, and its error paths."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from privreid.cli import app
from privreid.checkpoint import load_checkpoint
from privreid.federated.registry import available_methods

runner = CliRunner()

TINY = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--device", "cpu", "--quiet", "--test-domains", "synthC"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_train_eval_compare_end_to_end(tiny_synth, tmp_path):
    for method in ("centralized", "fedpav"):
        res = invoke("train", "--method", method, "--rounds", 1, "--data", tiny_synth, *TINY,
                     "--out", tmp_path / method)
        assert res.exit_code == 0, res.output
        summary = json.loads((tmp_path / method / "summary.json").read_text())
        assert summary["method"] == method and 0.0 <= summary["global_seen"]["rank1"] <= 1.0
        assert (tmp_path / method / "metrics.jsonl").read_text().count("\n") >= 3
    res = invoke("eval", "--model", tmp_path / "fedpav" / "ckpt.pt", "--domains", "synthC", "--device", "cpu",
                 "--json", tmp_path / "eval.json")
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "eval.json").read_text())
    assert [r["testset"] for r in rows] == ["synthC"]
    # eval of the checkpoint reproduces the unseen numbers the run logged
    summary = json.loads((tmp_path / "fedpav" / "summary.json").read_text())
    assert rows[0]["mAP"] == pytest.approx(summary["global_unseen"]["mAP"], abs=1e-6)
    res = invoke("eval", "--model", tmp_path / "fedpav" / "ckpt.pt", "--domains", "synthC", "--device", "cpu",
                 "--single-gallery-shot", "--json", tmp_path / "sgs.json")
    assert res.exit_code == 0, res.output
    sgs = json.loads((tmp_path / "sgs.json").read_text())[0]
    # CUHK03 protocol: CMC from sampled single-shot galleries, mAP over the whole gallery as torchreid
    assert sgs["mAP"] == pytest.approx(rows[0]["mAP"], abs=1e-6) and 0.0 <= sgs["rank1"] <= 1.0

    res = invoke("compare", tmp_path / "centralized" / "ckpt.pt", tmp_path / "fedpav" / "ckpt.pt",
                 "--device", "cpu", "--markdown", tmp_path / "table.md")
    assert res.exit_code == 0, res.output
    table = (tmp_path / "table.md").read_text()
    assert "untrained" in table and "centralized" in table and "fedpav" in table
    assert "seen R1" in table and "unseen mINP" in table


def test_data_synth_and_info(tmp_path):
    out = tmp_path / "s"
    res = invoke("data", "synth", "--out", out, "--domains", 2, "--height", 32, "--width", 16)
    assert res.exit_code == 0, res.output
    assert json.loads((out / "manifest.json").read_text())["domains"] == ["synthA", "synthB"]
    res = invoke("data", "info", out)
    assert res.exit_code == 0, res.output
    assert "synthA" in res.output and "synthB" in res.output
    res = invoke("data", "synth", "--out", out)
    assert res.exit_code == 2 and "error:" in res.output


def market_tree(root: Path, train_pids=(1, 2), bad=None):
    for split, pids in (("bounding_box_train", train_pids), ("query", (5,)), ("bounding_box_test", (5,))):
        (root / split).mkdir(parents=True, exist_ok=True)
        for pid in pids:
            for cam in (1, 2):
                Image.new("RGB", (16, 32), (pid * 20, cam * 50, 0)).save(root / split / f"{pid:04d}_c{cam}s1_000001_00.jpg")
    if bad:
        (root / "bounding_box_train" / bad).write_bytes(b"this is not a jpeg")
    return root


@pytest.mark.parametrize("case", ["missing", "empty", "unknown_layout", "no_identities", "corrupt_image",
                                  "unknown_method", "zero_rounds", "bad_protocol", "missing_weights", "bad_option"])
def test_train_bad_input_exits_2_and_writes_nothing(case, tmp_path, tiny_synth):
    data, extra = tiny_synth, []
    if case == "missing":
        data = tmp_path / "nope"
    elif case == "empty":
        data = tmp_path / "empty"
        data.mkdir()
    elif case == "unknown_layout":
        data = tmp_path / "odd"
        (data / "images").mkdir(parents=True)
        (data / "images" / "x.jpg").write_bytes(b"")
    elif case == "no_identities":
        data = market_tree(tmp_path / "market", train_pids=())
    elif case == "corrupt_image":
        data = market_tree(tmp_path / "market", bad="0001_c1s1_000002_00.jpg")
    elif case == "unknown_method":
        extra = ["--method", "fedmagic"]
    elif case == "zero_rounds":
        extra = ["--rounds", "0"]
    elif case == "bad_protocol":
        extra = ["--protocol", "by-moon"]
    elif case == "missing_weights":
        extra = ["--weights", str(tmp_path / "nope.pt")]
    elif case == "bad_option":
        extra = ["--opt", "nonsense=1"]
    out = tmp_path / "run"
    args = ["train", "--data", data, "--rounds", "1", *TINY, "--out", out, *extra]
    if case in ("no_identities", "corrupt_image"):
        args.remove("--test-domains"), args.remove("synthC")
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    assert res.output.strip().startswith("error:") and len(res.output.strip().splitlines()) == 1, res.output
    assert not out.exists()


def test_existing_run_is_refused_without_overwrite(tiny_synth, tmp_path):
    args = ["train", "--data", tiny_synth, "--rounds", "1", *TINY, "--out", tmp_path]
    assert invoke(*args).exit_code == 0
    before = (tmp_path / "ckpt.pt").stat().st_mtime_ns
    res = invoke(*args)
    assert res.exit_code == 2 and "already holds a run" in res.output
    assert (tmp_path / "ckpt.pt").stat().st_mtime_ns == before
    assert invoke(*args, "--overwrite").exit_code == 0


@pytest.mark.parametrize("content", [b"garbage", None])
def test_eval_bad_checkpoint(tmp_path, content):
    path = tmp_path / "ckpt.pt"
    if content is not None:
        path.write_bytes(content)
    res = invoke("eval", "--model", path)
    assert res.exit_code == 2 and res.output.startswith("error:"), res.output


def test_help_has_examples():
    for cmd in (["train"], ["eval"], ["compare"], ["data", "synth"], ["data", "info"], ["methods"]):
        res = invoke(*cmd, "--help")
        assert res.exit_code == 0 and "Example:" in res.output, cmd


def test_killed_run_resumes_to_the_same_result(tiny_synth, tmp_path):
    """SIGKILL a real `privreid train` process partway, resume, compare with an uninterrupted run."""
    base = [sys.executable, "-m", "privreid.cli", "train", "--data", str(tiny_synth), "--rounds", "4", *TINY]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*base, "--out", str(tmp_path / "full")], check=True, env=env, capture_output=True, timeout=300)

    cut = tmp_path / "cut"
    proc = subprocess.Popen([*base, "--out", str(cut)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            if (cut / "ckpt.pt").exists() and load_checkpoint(cut / "ckpt.pt")["round"] >= 1:
                break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_at = load_checkpoint(cut / "ckpt.pt")["round"]
    assert killed_at < 4, "the run finished before it could be killed"
    subprocess.run([*base, "--out", str(cut), "--resume"], check=True, env=env, capture_output=True, timeout=300)
    full = (tmp_path / "full" / "metrics.jsonl").read_text()
    assert (cut / "metrics.jsonl").read_text() == full


PRESETS = sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS, ids=[p.stem for p in PRESETS])
def test_presets_run_at_small_scale(preset, tiny_synth, tmp_path):
    """Each preset (GPU ones included) trains 1 round once scaled down by command-line overrides."""
    import yaml

    values = yaml.safe_load(preset.read_text())
    res = invoke("train", "--config", preset, "--data", tiny_synth, *TINY, "--arch", "resnet18",
                 "--pretrained", "none", "--rounds", 1, "--eval-every", 1, "--workers", 0, "--out", tmp_path)
    assert res.exit_code == 0, res.output
    cfg = load_checkpoint(tmp_path / "ckpt.pt")["config"]
    assert cfg["train"]["method"] == values["method"]
    assert cfg["train"]["lr_backbone"] == values["lr-backbone"]  # taken from the preset
    assert cfg["train"]["rounds"] == 1 and cfg["data"]["height"] == 32  # the command line wins


def test_preset_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("roundz: 3\n")
    res = invoke("train", "--config", bad, "--out", tmp_path / "o")
    assert res.exit_code == 2 and "unknown option 'roundz'" in res.output
    bad.write_text("rounds: [1,\n")
    assert "not valid YAML" in invoke("train", "--config", bad).output
    assert "preset not found" in invoke("train", "--config", tmp_path / "none.yaml").output


@pytest.mark.parametrize("method", available_methods())
def test_every_method_trains_and_its_checkpoint_evaluates(method, tiny_synth, tmp_path):
    res = invoke("train", "--method", method, "--rounds", 1, "--data", tiny_synth, *TINY, "--out", tmp_path)
    assert res.exit_code == 0, res.output
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    client = [] if ckpt.get("has_global_model", True) else ["--client", sorted(ckpt["client_states"])[0]]
    res = invoke("eval", "--model", tmp_path / "ckpt.pt", "--domains", "synthC", "--device", "cpu", *client,
                 "--json", tmp_path / "eval.json")
    assert res.exit_code == 0, res.output
    row = json.loads((tmp_path / "eval.json").read_text())[0]
    assert row["testset"] == "synthC" and 0.0 <= row["mAP"] <= 1.0 and row["num_valid_queries"] > 0
