"""Bad inputs refused by argument checking alone: one ``error:`` line, exit 2, nothing written (tests/badinput.py)."""

from __future__ import annotations

import pytest

from badinput import BadInput, check_refused

CASES = [
    BadInput("train-negative-rounds", ("train", "--rounds", "-3", "--out", "{tmp}/run"), keep=("run",),
             says="rounds must be > 0"),
    BadInput("reproduce-unknown-table", ("reproduce", "nope", "--out", "{tmp}/out"), keep=("out",),
             says="nope"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_refused_in_one_line(case, tmp_path):
    check_refused(case, tmp_path)
