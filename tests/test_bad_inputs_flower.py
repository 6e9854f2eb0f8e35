"""Bad inputs to ``privreid flower``: each refused in one ``error:`` line, exit 2, before any Flower process
starts (no server is needed) (issue 26)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from badinput import BadInput, check_refused, fake_superlink, run_cli
from privreid.flower import deployment
from privreid.flower.messages import FlowerRunError


def _garbage_certificates(tmp: Path) -> None:
    for name in ("server.pem", "server.key", "ca.pem"):
        (tmp / name).write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")


CERTS = ("--ssl-certfile", "{tmp}/server.pem", "--ssl-keyfile", "{tmp}/server.key", "--ssl-ca-certfile",
         "{tmp}/ca.pem")
CASES = [
    BadInput("superlink-port-out-of-range", ("flower", "superlink", "--insecure", "--port", "70000"),
             says="--port 70000"),
    BadInput("superlink-port-zero", ("flower", "superlink", "--insecure", "--port", "0"), says="1 to 65535"),
    BadInput("supernode-port-out-of-range", ("flower", "supernode", "--data", "synth", "--insecure", "--port",
                                             "-1"), says="--port -1"),
    BadInput("superlink-garbage-certificate", ("flower", "superlink", *CERTS), setup=_garbage_certificates,
             says="not a PEM certificate"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_refused(case, tmp_path, monkeypatch):
    monkeypatch.setattr("os.execve", lambda *a: pytest.fail(f"started {a[0]}"))
    check_refused(case, tmp_path)


def test_an_unreachable_superlinks_message_is_one_line(monkeypatch, tmp_path):
    """``flwr run`` against nothing answers with a multi-line message: privreid passes it on as one line."""
    answer = '{"success": false, "error-message": "Connection to the SuperLink is unavailable.\\n\\nPlease check ' \
             'the address."}'
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, answer, ""))
    with pytest.raises(FlowerRunError) as caught:
        deployment.submit(tmp_path, tmp_path)
    assert str(caught.value) == ("flwr run: Connection to the SuperLink is unavailable. Please check the "
                                 "address.")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "Traceback\n  x\nE"))
    with pytest.raises(FlowerRunError, match="^flwr run failed: Traceback x E$"):
        deployment.submit(tmp_path, tmp_path)


def test_flower_run_writes_the_provenance_of_train(tmp_path, monkeypatch):
    """Issue 26, 5: `flower run` records config.yaml, env.json and log.txt as `train` does (the SuperLink faked)."""
    import json

    import yaml

    def fake_run(settings, superlink, **kwargs):
        (settings.out_dir / "summary.json").write_text(json.dumps({"method": "fedpav", "rounds": 1}))

    monkeypatch.setattr("privreid.flower.deployment.run_on_superlink", fake_run)
    out = tmp_path / "fl"
    res = run_cli(("flower", "run", "--insecure", "--rounds", "1", "--seed", "5", "--quiet", "--out", str(out)))
    assert res.exit_code == 0, res.stderr
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["rounds"] == 1 and config["seed"] == 5 and config["superlink"] == "127.0.0.1:8000"
    assert json.loads((out / "env.json").read_text())["seed"] == 5
    assert "fedpav on Flower: waiting for" in (out / "log.txt").read_text()


def test_flower_run_resume_before_the_first_checkpoint_starts_from_round_0(tmp_path, monkeypatch):
    """Issue 39, item 8: as `train --resume`, a Flower run stopped before its first checkpoint starts from round 0
    (the ServerApp is told not to resume), saying so in one line (the SuperLink faked)."""
    told = fake_superlink(monkeypatch)
    out = tmp_path / "fl"
    args = ("flower", "run", "--insecure", "--rounds", "1", "--quiet", "--out", str(out))
    assert run_cli(args).exit_code == 0
    (out / "summary.json").unlink()  # as a run killed before its first checkpoint leaves it
    (out / "metrics.jsonl").write_text('{"round": 1, "scope": "train"}\n')
    res = run_cli((*args, "--resume"))
    assert res.exit_code == 0, res.stderr
    assert [s.resume for s in told] == [False, False]
    assert "starting it from round 0 with its recorded configuration" in res.stdout
    assert not (out / "metrics.jsonl").exists()  # the restarted run's own, removed before it starts
