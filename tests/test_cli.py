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
    assert cfg["federation"]["method"] == values["method"]
    assert cfg["optim"]["lr_backbone"] == values["lr-backbone"]  # taken from the preset
    assert cfg["federation"]["rounds"] == 1 and cfg["data"]["height"] == 32  # the command line wins


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


# --------------------------------------------------------------------------- issue 13, section 4a: one case per row
def _held_lock(tmp_path, monkeypatch):
    from privreid.rundir import RunLock

    out = tmp_path / "run"
    out.mkdir()
    lock = RunLock(out).acquire()
    monkeypatch.setattr("privreid.rundir.RunLock.release", lambda self: None)  # keep the lock held
    return lock


def _preset(tmp_path, text):
    path = tmp_path / "preset.yaml"
    path.write_text(text)
    return ["--config", path]


def _read_only(monkeypatch):
    """A read-only file system as os.access reports it (tests run as root, so chmod would not do)."""
    monkeypatch.setattr("privreid.rundir.os.access", lambda path, mode: False)


def _unreadable(root, monkeypatch):
    real = Path.iterdir

    def iterdir(self):
        if str(self).startswith(str(root)):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)


def _pickle(path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    import pickle
    path.write_bytes(pickle.dumps({"x": Evil()}))
    return path


def _file(path, text="x"):
    path.write_text(text)
    return path


TRAIN = ["train", "--rounds", "1", *TINY]
CASES = {
    # 4a.1 no lock on --out
    "4a.1-locked-out": lambda t, s, m: ([*TRAIN, "--data", s, "--out", _held_lock(t, m) and t / "run"],
                                        "in use by another privreid run"),
    # 4a.2 typed YAML presets
    "4a.2-preset-rounds-abc": lambda t, s, m: ([*TRAIN[:1], *_preset(t, 'rounds: "abc"\n'), "--out", t / "o"],
                                               "rounds"),
    "4a.2-preset-rounds-float": lambda t, s, m: ([*TRAIN[:1], *_preset(t, "rounds: 2.7\n"), "--out", t / "o"],
                                                 "rounds"),
    "4a.2-preset-data-int": lambda t, s, m: ([*TRAIN[:1], *_preset(t, "data: 5\n"), "--out", t / "o"], "5"),
    # 4a.4 bad output paths, checked before any work
    "4a.4-train-out-is-file": lambda t, s, m: ([*TRAIN, "--data", s, "--out", _file(t / "f")], "is a file"),
    "4a.4-train-out-read-only": lambda t, s, m: ([*TRAIN, "--data", s, "--out", t / "o"], _read_only(m) or
                                                 "not writable"),
    "4a.4-eval-json-directory": lambda t, s, m: (["eval", "--model", t / "x.pt", "--json", t], "is a directory"),
    "4a.4-eval-json-missing-parent": lambda t, s, m: (["eval", "--model", t / "x.pt", "--json", t / "no" / "x.json"],
                                                      "does not exist"),
    "4a.4-compare-markdown": lambda t, s, m: (["compare", t / "x.pt", "--markdown", "/nonexistent/x.md"],
                                              "does not exist"),
    "4a.4-compare-suite-out-file": lambda t, s, m: (["compare", t / "x.pt", "--suite", "clean", "--out",
                                                     _file(t / "f")], "is a file"),
    "4a.4-attack-out-file": lambda t, s, m: (["attack", "--model", t / "x.pt", "--out", _file(t / "f")], "is a file"),
    "4a.4-invert-out-file": lambda t, s, m: (["invert", "--model", t / "x.pt", "--out", _file(t / "f")], "is a file"),
    "4a.4-sweep-out-file": lambda t, s, m: (["sweep", "--param", "beta", "--values", "0", "--no-leakage", "--out",
                                             _file(t / "f")], "is a file"),
    "4a.4-corrupt-out-directory": lambda t, s, m: (["corrupt", "--image", t / "x.jpg", "--out", t],
                                                   "is a directory"),
    "4a.4-synth-out-read-only": lambda t, s, m: (["data", "synth", "--out", t / "o"], _read_only(m) or
                                                 "not writable"),
    # 4a.5 numeric sanity
    "4a.5-lr-head-inf": lambda t, s, m: ([*TRAIN, "--data", s, "--lr-head", "inf", "--out", t / "o"],
                                         "finite"),
    "4a.5-lr-gamma-nan": lambda t, s, m: ([*TRAIN, "--data", s, "--lr-gamma", "nan", "--out", t / "o"], "lr_gamma"),
    "4a.5-lr-gamma-negative": lambda t, s, m: ([*TRAIN, "--data", s, "--lr-gamma", "-1", "--out", t / "o"],
                                               "lr_gamma"),
    # 4a.6 values that passed validation and crashed
    "4a.6-batch-size-1": lambda t, s, m: ([*TRAIN, "--data", s, "--batch-size", "1", "--out", t / "o"],
                                          "batch_size"),
    "4a.6-workers-negative": lambda t, s, m: ([*TRAIN, "--data", s, "--workers", "-1", "--out", t / "o"], "workers"),
    "4a.6-feat-dim-huge": lambda t, s, m: ([*TRAIN, "--data", s, "--feat-dim", "100000000", "--out", t / "o"],
                                           "feat_dim"),
    "4a.6-invert-lr-nan": lambda t, s, m: (["invert", "--model", t / "x.pt", "--lr", "nan", "--out", t / "o"],
                                           "--lr must be finite"),
    "4a.6-unreadable-root": lambda t, s, m: ([*TRAIN, "--data", s, "--out", t / "o"], _unreadable(s, m) or
                                             "Permission denied"),
    # 4a.8 --insecure only on loopback
    "4a.8-superlink-any-interface": lambda t, s, m: (["flower", "superlink", "--host", "0.0.0.0", "--insecure"],
                                                     "not a loopback address"),
    "4a.8-supernode-remote": lambda t, s, m: (["flower", "supernode", "--data", s, "--insecure", "--superlink",
                                               "203.0.113.5:8000"], "not a loopback address"),
    # 4a.9 corrupt, zero-byte images found by data info
    "4a.9-info-corrupt-image": lambda t, s, m: (["data", "info", market_tree(t / "m", bad="0001_c1s1_000002_00.jpg")],
                                                "corrupt image"),
    "4a.9-info-empty-image": lambda t, s, m: (["data", "info", _file(market_tree(t / "m") / "bounding_box_train" /
                                                                     "0001_c1s1_000009_00.jpg", "").parents[1]],
                                              "corrupt image"),
    # 4a.10 late validation errors leave no empty output directory
    "4a.10-random-erasing": lambda t, s, m: ([*TRAIN, "--data", s, "--random-erasing", "2", "--out", t / "o"],
                                             "random_erasing"),
    "4a.10-compare-suite-eps": lambda t, s, m: (["compare", t / "x.pt", "--suite", "attacks", "--eps", "2", "--out",
                                                 t / "o"], ""),
    "4a.10-sweep-unknown-method": lambda t, s, m: (["sweep", "--param", "beta", "--values", "0", "--no-leakage",
                                                    "--out", t / "o", "--method", "nosuch"], "nosuch"),
    # 4a.12 messages
    "4a.12-format-lists-vi": lambda t, s, m: (["data", "info", market_tree(t / "m"), "--format", "nosuch"],
                                              "sysu-mm01"),
    "4a.12-synth-foreign-dir": lambda t, s, m: (["data", "synth", "--out", _file(t / "d" / "x").parent],
                                                 "never replaced"),
    "4a.12-text-checkpoint": lambda t, s, m: (["eval", "--model", _file(t / "c.pt", "just text\n" * 9)],
                                              "not a model file privreid reads"),
    "4a.12-pickle-names-global": lambda t, s, m: (["eval", "--model", _pickle(t / "evil.pkl")],
                                                  "the global posix.system"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hardening_bad_input_is_one_line_and_leaves_nothing(case, tmp_path, tiny_synth, monkeypatch):
    (tmp_path / "d").mkdir()
    args, needle = CASES[case](tmp_path, tiny_synth, monkeypatch)
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), res.output  # no warning, no traceback before it
    assert needle in lines[0], lines[0]
    assert not (tmp_path / "o").exists()  # nothing written, not even an empty directory
    if case == "4a.12-pickle-names-global":
        assert "PyTorch" not in lines[0] and len(lines[0].replace(str(tmp_path), "")) < 150


def test_killed_first_write_hints_agree_and_temporaries_are_cleaned(tiny_synth, tmp_path):
    """4a.7: a kill during the first checkpoint write leaves metrics.jsonl and a .tmp, no ckpt.pt."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"round": 1, "scope": "train"}\n')
    (out / ".ckpt.pt.privreid.tmp").write_bytes(b"half a checkpoint")
    (out / ".notes.tmp").write_text("the user's")  # not privreid's: it stays
    args = ["train", "--data", tiny_synth, "--rounds", "1", *TINY, "--out", out]
    res = invoke(*args)
    assert res.exit_code == 2 and "stopped before its first checkpoint" in res.output, res.output
    assert "pass --resume to start it from round 0" in res.output and "--overwrite" in res.output
    assert invoke(*args, "--overwrite").exit_code == 0
    assert [p.name for p in out.glob(".*.tmp")] == [".notes.tmp"]


def test_resume_accepts_device_and_workers_refuses_fewer_rounds(tiny_synth, tmp_path):
    """4a.11: --device auto -> cpu and --workers do not change results; --rounds below the checkpoint's is refused."""
    base = ["train", "--data", tiny_synth, *TINY, "--out", tmp_path]
    assert invoke(*base, "--rounds", "1").exit_code == 0
    before = (tmp_path / "summary.json").read_text()
    res = invoke(*base, "--rounds", "1", "--resume", "--device", "auto", "--workers", "1")
    assert res.exit_code == 0, res.output
    res = invoke(*base, "--rounds", "2", "--resume")
    assert res.exit_code == 0, res.output
    res = invoke(*base, "--rounds", "1", "--resume")
    assert res.exit_code == 2 and "has completed 2 rounds" in res.output, res.output
    assert json.loads((tmp_path / "summary.json").read_text())["rounds"] == 2 != json.loads(before)["rounds"]


def test_eval_of_a_pickle_prints_no_torch_warning(tmp_path):
    """4a.12: the refusal is the only line (torch's pickle-protocol UserWarning is not shown)."""
    res = invoke("eval", "--model", _pickle(tmp_path / "evil.pkl"))
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "Warning" not in res.output, res.output
