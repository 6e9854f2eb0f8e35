"""Bad checkpoints and client memories: one ``error:`` line, exit 2, nothing written (tests/badinput.py; issue 26)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from badinput import BadInput, check_refused
from privreid.checkpoint import load_checkpoint, save_checkpoint
from privreid.rundir import MEMORY_DIR


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


# --------------------------------------------------------------------------- issue 39: nothing a user can edit is trusted
#: every checkpoint field set to a value of the wrong type, with the integrity hash recomputed (as anyone can)
WRONG_TYPE = {"method": 7, "round": "2", "config": [], "model_config": 3, "global_state": {"w": 1.0},
              "server_state": "x", "global_eval_extra": [1], "initial_local_state": 1, "client_states": 1,
              "client_classes": {"synthA": "5"}, "client_memory_files": {"synthA": 3}, "server_client_state": [],
              "client_memory_hashes": {"synthA": "md5:0"}, "has_global_model": "yes", "observer_state": 1,
              "audit_holdout": [], "metrics": {}, "comm": [1]}
#: out of range, or names what is not there
OUT_OF_RANGE = {"round-negative": ("round", -1, "round must lie in 0..2"),
                "round-past-the-configured-rounds": ("round", 3, "round must lie in 0..2"),
                "round-a-bool": ("round", True, "round must be an integer"),
                "method-unregistered": ("method", "nosuch", "unknown method"),
                "method-not-the-configured-one": ("method", "fedavg", "is not its configuration's ('fedpav')"),
                "client-classes-negative": ("client_classes", {"synthA": -1}, "identity counts")}
#: config fields edited as a flag would be refused
BAD_CONFIG = {"height-past-the-cap": ("data", "height", 100000, "too large (max 2048 per side"),
              "height-a-float": ("data", "height", 32.0, "data.height must be an integer"),
              "rounds-text": ("federation", "rounds", "2", "federation.rounds must be an integer"),
              "lr-nan": ("optim", "lr_backbone", float("nan"), "must be a finite number"),
              "feat-dim-zero": ("model", "feat_dim", 0, "feat_dim must lie in [1, 65536]")}


def _set(key, value):
    return lambda tmp: _edit(tmp / "run", lambda raw: raw.__setitem__(key, value))


def _set_config(section, key, value):
    return lambda tmp: _edit(tmp / "run", lambda raw: raw["config"][section].__setitem__(key, value))


def _drop(key):
    return lambda tmp: _edit(tmp / "run", lambda raw: raw.pop(key))


EDITED = ([BadInput(f"{verb}-{key}-wrong-type", args, keep=("run",), says=f"{key} must be", setup=_set(key, value))
           for key, value in WRONG_TYPE.items() for verb, args in (("eval", EVAL), ("resume", RESUME))]
          + [BadInput(f"{verb}-{case}", args, keep=("run",), says=says, setup=_set(key, value))
             for case, (key, value, says) in OUT_OF_RANGE.items() for verb, args in (("eval", EVAL), ("resume", RESUME))]
          + [BadInput(f"eval-config-{case}", EVAL, keep=("run",), says=says, setup=_set_config(section, key, value))
             for case, (section, key, value, says) in BAD_CONFIG.items()]
          + [BadInput(f"eval-missing-{key}", EVAL, keep=("run",), says=f"missing {key}", setup=_drop(key))
             for key in ("method", "round", "config", "model_config", "global_state", "client_states")])


def _memory_of(tmp: Path, client: str) -> Path:
    return next((tmp / "run" / MEMORY_DIR).glob(f"{client}.r*.pt"))


def _flip_memory_byte(tmp: Path) -> None:
    """One byte of synthA's trained copy flipped (a tensor's data, which torch loads without complaint)."""
    path = _memory_of(tmp, "synthA")
    raw = bytearray(path.read_bytes())
    tensor = next(v for k, v in torch.load(path, weights_only=True).items() if v.numel() > 100)
    at = bytes(raw).index(tensor.numpy().tobytes()[:64]) + 10
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


def _bare_malicious_pickle(tmp: Path) -> None:
    """A plain pickle (not a torch zip) that would import os.system: named as malicious, never as "truncated"."""
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    _memory_of(tmp, "synthA").write_bytes(pickle.dumps({"w": Evil()}, protocol=2))


def _swap_memory(tmp: Path) -> None:
    shutil.copyfile(_memory_of(tmp, "synthB"), _memory_of(tmp, "synthA"))


def _rewrite_memory(content):
    """synthA's memory file replaced by ``content``, and the hash the checkpoint records of it recomputed."""
    def setup(tmp: Path) -> None:
        from privreid.checkpoint import file_sha256

        path = _memory_of(tmp, "synthA")
        torch.save(content, path)
        _edit(tmp / "run", lambda raw: raw["client_memory_hashes"].update(synthA=file_sha256(path)))
    return setup


def _point_at_another_clients_file(tmp: Path) -> None:
    """synthA's entry names synthB's file, with synthB's hash: each file is whole, but not synthA's."""
    def change(raw):
        raw["client_memory_files"]["synthA"] = raw["client_memory_files"]["synthB"]
        raw["client_memory_hashes"]["synthA"] = raw["client_memory_hashes"]["synthB"]
    _edit(tmp / "run", change)


EVAL_CLIENT = (*EVAL, "--client", "synthA")
EXPORT_CLIENT = ("export", "--model", "{run}/ckpt.pt", "--client", "synthA", "--out", "{tmp}/exported.pt")
MEMORY_READERS = (("eval", EVAL_CLIENT), ("export", EXPORT_CLIENT), ("resume", RESUME))
MEMORIES = ([BadInput(f"{verb}-memory-{what}", args, keep=("run", "exported.pt"), says=says, setup=setup)
             for verb, args in MEMORY_READERS
             for what, setup, says in (
                 ("byte-flipped", _flip_memory_byte, "whose bytes are not those the checkpoint recorded"),
                 ("swapped", _swap_memory, "whose bytes are not those the checkpoint recorded"),
                 ("a-bare-malicious-pickle", _bare_malicious_pickle, "nothing was executed"),
                 ("another-clients-file", _point_at_another_clients_file,
                  "which is not that client's file of a round up to 2"),
                 ("a-list", _rewrite_memory([1, 2]), "a memory is a mapping of names to values"),
                 ("trained-not-a-tensor", _rewrite_memory({"trained/backbone.conv1.weight": 1.0}),
                  "trained/backbone.conv1.weight must be a tensor"))]
            + [BadInput("eval-memory-a-fifo", EVAL_CLIENT, keep=("run",), says="which is not a regular file",
                        setup=lambda tmp: (_memory_of(tmp, "synthA").unlink(),
                                           os.mkfifo(tmp / "run" / MEMORY_DIR / "synthA.r2.pt"))),
               BadInput("eval-ckpt-a-directory", ("eval", "--model", "{tmp}/dir", "--device", "cpu"), keep=("run",),
                        says="is a directory", setup=lambda tmp: (tmp / "dir").mkdir())])


@pytest.mark.parametrize("case", EDITED + MEMORIES, ids=str)
def test_edited_checkpoints_and_memories_are_refused_before_anything_is_written(case, tmp_path, finished_run):
    shutil.copytree(finished_run, tmp_path / "run")
    check_refused(case, tmp_path, run=tmp_path / "run")


def test_the_checkpoint_records_the_hash_of_each_memory_file(finished_run):
    from privreid.checkpoint import file_sha256

    raw = load_checkpoint(finished_run / "ckpt.pt", client_memory=False)
    files = {name: f for name, f in raw["client_memory_files"].items() if f}
    assert files and raw["client_memory_hashes"] == {
        name: file_sha256(finished_run / MEMORY_DIR / f) for name, f in files.items()}


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
