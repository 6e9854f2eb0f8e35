"""A refused command leaves an existing run directory byte for byte as it was (issue 26, section 1).

One tiny finished run is trained once per module; each test copies it and
points a refused command at the copy (tests/badinput.py hashes the tree).
"""

from __future__ import annotations

import pickle
import shutil

import pytest

from badinput import BadInput, check_refused, run_cli

TINY = ("--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--device", "cpu", "--quiet", "--test-domains", "synthC")


@pytest.fixture(scope="module")
def finished_run(tiny_synth, tmp_path_factory):
    """A one-round FedPav run (train's every file), and an attack's results directory beside it."""
    root = tmp_path_factory.mktemp("finished")
    res = run_cli(("train", "--data", str(tiny_synth), "--rounds", "1", *TINY, "--out", str(root / "run")))
    assert res.exit_code == 0, res.stderr
    return root / "run"


class _Evil:
    def __reduce__(self):
        return (print, ("executed",))


def _truncate(tmp):
    data = (tmp / "run" / "ckpt.pt").read_bytes()
    (tmp / "run" / "ckpt.pt").write_bytes(data[: len(data) // 2])


def _empty(tmp):
    (tmp / "run" / "ckpt.pt").write_bytes(b"")


def _malicious(tmp):
    with open(tmp / "run" / "ckpt.pt", "wb") as fh:
        pickle.dump({"format": _Evil()}, fh)


TRAIN = ("train", "--data", "{synth}", *TINY, "--out", "{tmp}/run")
#: another command pointed at the train run is refused for its kind first, before its own checks (issue 39)
KIND = "holds the output of `privreid train`"
CASES = [
    BadInput("resume-other-method", (*TRAIN, "--rounds", "2", "--resume", "--method", "fedavg"), keep=("run",),
             says="federation.method"),
    BadInput("resume-changed-lr", ("train", "--out", "{tmp}/run", "--resume", "--lr-backbone", "0.5"),
             keep=("run",), says="lr_backbone"),
    BadInput("resume-fewer-rounds", ("train", "--out", "{tmp}/run", "--resume", "--rounds", "0"), keep=("run",),
             says="rounds"),
    BadInput("resume-truncated-ckpt", ("train", "--out", "{tmp}/run", "--resume"), keep=("run",), setup=_truncate,
             says="is a torch file cut short or damaged"),
    BadInput("resume-zero-byte-ckpt", ("train", "--out", "{tmp}/run", "--resume"), keep=("run",), setup=_empty,
             says="not a privreid checkpoint"),
    BadInput("resume-malicious-ckpt", ("train", "--out", "{tmp}/run", "--resume"), keep=("run",), setup=_malicious,
             says="refusing to load"),
    BadInput("train-again-without-flags", (*TRAIN, "--rounds", "1"), keep=("run",), says="already holds a run"),
    BadInput("attack-missing-model", ("attack", "--model", "{tmp}/nope.pt", "--out", "{tmp}/run"), keep=("run",),
             says=KIND),
    BadInput("attack-bad-eps", ("attack", "--model", "{tmp}/run/ckpt.pt", "--eps", "2", "--out", "{tmp}/run"),
             keep=("run",), says="eps"),
    BadInput("invert-missing-model", ("invert", "--model", "{tmp}/nope.pt", "--out", "{tmp}/run"), keep=("run",),
             says=KIND),
    BadInput("invert-bad-lr", ("invert", "--model", "{tmp}/run/ckpt.pt", "--lr", "0", "--out", "{tmp}/run"),
             keep=("run",), says="--lr"),
    BadInput("compare-suite-missing-model", ("compare", "{tmp}/nope.pt", "--suite", "attacks", "--out", "{tmp}/run"),
             keep=("run",), says=KIND),
    BadInput("audit-missing-model", ("audit", "{tmp}/nope.pt", "--out", "{tmp}/run"), keep=("run",),
             says=KIND),
    BadInput("sweep-unknown-method", ("sweep", "--param", "beta", "--values", "0", "--no-leakage", "--method",
                                      "nosuch", "--out", "{tmp}/run"), keep=("run",), says=KIND),
    BadInput("reproduce-unknown-table", ("reproduce", "nope", "--out", "{tmp}/run"), keep=("run",), says=KIND),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_refused_command_leaves_the_run_unchanged(case, finished_run, tiny_synth, tmp_path):
    shutil.copytree(finished_run, tmp_path / "run")
    check_refused(case, tmp_path, synth=tiny_synth)
