"""Bad checkpoints and client memories: one ``error:`` line, exit 2, nothing written (tests/badinput.py; issue 26)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from badinput import BadInput, check_refused, run_cli
from privreid.checkpoint import load_checkpoint, save_checkpoint
from privreid.federated.memory_store import MEMORY_DIR

TINY = ("--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--device", "cpu", "--quiet")


def _edit(run: Path, change) -> None:
    raw = load_checkpoint(run / "ckpt.pt", client_memory=False)
    change(raw)
    save_checkpoint(raw, run / "ckpt.pt")


def _first_float(state: dict) -> str:
    return next(k for k, v in state.items() if v.is_floating_point() and v.numel() > 100)


def _nan_weights(tmp: Path) -> None:
    def change(raw):
        key = _first_float(raw["global_state"])
        raw["global_state"][key] = torch.full_like(raw["global_state"][key], float("nan"))
    _edit(tmp / "run", change)


def _flip_tensor_bytes(tmp: Path) -> None:
    path = tmp / "run" / "ckpt.pt"
    raw = bytearray(path.read_bytes())
    state = load_checkpoint(path, client_memory=False)["global_state"]
    at = bytes(raw).index(state[_first_float(state)].numpy().tobytes()[:256])
    for i in range(at, at + 200):
        raw[i] ^= 0x5A
    path.write_bytes(bytes(raw))


def _memory(tmp: Path) -> Path:
    return sorted((tmp / "run" / MEMORY_DIR).glob("*.pt"))[0]


def _truncate_memory(tmp: Path) -> None:
    path = _memory(tmp)
    path.write_bytes(path.read_bytes()[:1000])


def _malicious_memory(tmp: Path) -> None:
    class Evil:
        def __reduce__(self):
            return (open, (str(tmp / "pwned"), "w"))

    torch.save({"w": Evil()}, _memory(tmp))


EVAL = ("eval", "--model", "{run}/ckpt.pt", "--device", "cpu")
RESUME = ("train", "--out", "{run}", "--resume", "--rounds", "3", "--quiet")

CASES = [
    BadInput("eval-client-path-traversal", (*EVAL, "--client", "../.."), keep=("run",), says="clients: synthA, synthB"),
    BadInput("eval-memory-outside-the-run", EVAL, keep=("run",), says="outside",
             setup=lambda tmp: _edit(tmp / "run", lambda raw: raw["client_memory_files"].update(synthA="/etc/passwd"))),
    BadInput("eval-memory-dotdot", EVAL, keep=("run",), says="outside",
             setup=lambda tmp: _edit(tmp / "run", lambda raw: raw["client_memory_files"].update(synthA="../ckpt.pt"))),
    BadInput("eval-non-finite-weights", EVAL, keep=("run",), says="non-finite weights", setup=_nan_weights),
    BadInput("export-onnx-non-finite-weights", ("export", "--model", "{run}/ckpt.pt", "--format", "onnx", "--out",
                                                "{tmp}/model.onnx"), keep=("run", "model.onnx"),
             says="non-finite weights", setup=_nan_weights),
    BadInput("eval-model-config-mismatch", EVAL, keep=("run",), says="in the checkpoint, (64",
             setup=lambda tmp: _edit(tmp / "run", lambda raw: raw["model_config"].update(feat_dim=64))),
    BadInput("eval-flipped-bytes", EVAL, keep=("run",), says="corrupted (integrity hash mismatch)",
             setup=_flip_tensor_bytes),
    BadInput("resume-missing-memory", RESUME, keep=("run",), says="(round 2) keeps client",
             setup=lambda tmp: _memory(tmp).unlink()),
    BadInput("resume-truncated-memory", RESUME, keep=("run",), says="truncated", setup=_truncate_memory),
    BadInput("resume-malicious-memory", RESUME, keep=("run",), says="nothing was executed", setup=_malicious_memory),
    BadInput("audit-round-past-the-checkpoint", ("audit", "--models", "{run}/ckpt.pt", "--view", "server", "--round",
                                                 "99", "--out", "{tmp}/audit", "--device", "cpu", "--quiet"),
             keep=("run", "audit"), says="past the checkpoint's last round (2)"),
]


@pytest.fixture(scope="module")
def finished_run(tiny_synth, tmp_path_factory) -> Path:
    """A finished 2-round FedPav run written by ``privreid train`` (config.yaml, ckpt.pt, client_memory/)."""
    out = tmp_path_factory.mktemp("trust") / "run"
    outcome = run_cli(("train", "--data", str(tiny_synth), "--test-domains", "synthC", "--method", "fedpav",
                       "--rounds", "2", *TINY, "--out", str(out)))
    assert outcome.exit_code == 0, outcome.stderr
    return out


@pytest.mark.parametrize("case", CASES, ids=str)
def test_refused_in_one_line(case, tmp_path, finished_run):
    shutil.copytree(finished_run, tmp_path / "run")
    check_refused(case, tmp_path, run=tmp_path / "run")
    assert not (tmp_path / "pwned").exists()


def test_a_text_file_is_no_model_file_not_a_refused_pickle(tmp_path):
    """A short text file (torch's legacy reader calls it a bad pickle) is named as no model file at all."""
    from badinput import assert_one_error_line, run_cli

    (tmp_path / "hostname").write_text("vm\n")
    line = assert_one_error_line(run_cli(("eval", "--model", str(tmp_path / "hostname"), "--data", "synth")))
    assert "is not a model file privreid reads" in line and "refusing" not in line, line
