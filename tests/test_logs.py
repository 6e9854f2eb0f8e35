"""Logs (issue 28, section 3): messages go through ``logging``; ``log.txt`` holds stamped lines and no bar frames;
bars draw only on a terminal; a library call configures nothing and prints nothing."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys

import pytest

from badinput import REPO, run_cli

TINY = ("--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--device", "cpu", "--test-domains", "synthC")
#: one line of log.txt: date, time, level, message
LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S.*")


def assert_clean_log(path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    assert "\r" not in text and "\x1b" not in text, text
    lines = text.splitlines()
    assert lines and all(LINE.fullmatch(line) for line in lines), text
    return lines


def test_log_txt_of_a_train_and_an_invert_run_is_stamped_lines_without_bar_frames(tiny_synth, tmp_path):
    run = tmp_path / "run"
    res = run_cli(("train", "--data", str(tiny_synth), *TINY, "--rounds", "2", "--out", str(run)))
    assert res.exit_code == 0, res.stderr
    lines = assert_clean_log(run / "log.txt")
    assert any(re.search(r" INFO round 2 global unseen synthC +R1 ", line) for line in lines), lines

    res = run_cli(("invert", "--model", str(run / "ckpt.pt"), "--subjects", "1", "--iterations", "3", "--device", "cpu",
                   "--out", str(tmp_path / "inv")))
    assert res.exit_code == 0, res.stderr
    assert_clean_log(tmp_path / "inv" / "log.txt")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_draw_on_a_terminal_only_and_never_into_log_txt(tmp_path, monkeypatch):
    from privreid.log import progress_bar
    from privreid.provenance import run_log

    screen = _Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    with run_log(tmp_path):
        for _ in progress_bar(range(3), desc="drawn"):
            pass
        print("a result line")
    assert "drawn" in screen.getvalue() and "\r" in screen.getvalue()  # the terminal saw the bar
    assert [line.split(" ", 3)[2:] for line in assert_clean_log(tmp_path / "log.txt")] == [["INFO", "a result line"]]

    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    for _ in progress_bar(range(3), desc="hidden"):
        pass
    assert piped.getvalue() == ""  # not a terminal: no bar at all


def test_records_reach_log_txt_with_their_level_and_a_library_can_redirect_them(tmp_path):
    from privreid.provenance import run_log

    logger = logging.getLogger("privreid.some.module")
    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    logging.getLogger("privreid").addHandler(handler)
    try:
        with run_log(tmp_path):
            logger.info("two\nlines")
            logger.warning("careful")
    finally:
        logging.getLogger("privreid").removeHandler(handler)
    lines = assert_clean_log(tmp_path / "log.txt")
    assert [line.split(" ", 3)[2:] for line in lines] == [["INFO", "two"], ["INFO", "lines"], ["WARNING", "careful"]]
    assert [r.getMessage() for r in seen] == ["two\nlines", "careful"]


@pytest.mark.slow
def test_a_library_call_with_no_logging_configured_prints_nothing(tiny_synth, tmp_path):
    script = (
        "import sys, privreid\n"
        "from conftest import tiny_config\n"
        f"privreid.train_run(tiny_config({str(tiny_synth)!r}, rounds=1), {str(tmp_path / 'run')!r})\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1",
                               "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])})
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout, proc.stderr) == ("", "")
    lines = assert_clean_log(tmp_path / "run" / "log.txt")  # the run's own log still has the messages
    assert any(" INFO round 1 global unseen synthC " in line for line in lines), lines
