"""Bad --precision inputs: refused in one line before anything is written (tests/badinput.py)."""

from __future__ import annotations

import pytest

from badinput import BadInput, check_refused

REFUSED = [
    BadInput("train-precision-unknown", ("train", "--data", "{synth}", "--precision", "fp8", "--device", "cpu",
                                         "--out", "{tmp}/run"), keep=("run",), says="'fp8' is not one of"),
    BadInput("train-dp-sgd-fp16", ("train", "--data", "{synth}", "--dp-sgd", "--noise-multiplier", "1",
                                   "--precision", "fp16", "--device", "cpu", "--out", "{tmp}/run"), keep=("run",),
             says="--dp-sgd with --precision fp16 is not supported"),
]


@pytest.mark.parametrize("case", REFUSED, ids=str)
def test_refused(case, tiny_synth, tmp_path):
    assert case.says, f"{case.id}: a case names what its one line must say"  # else the check below is vacuous
    line = check_refused(case, tmp_path, synth=tiny_synth)
    assert case.says.lower() in line.lower()
