"""docs/extending.md's worked examples, run as written: a dataset format, a federated method, an aggregation rule,
a defense, an inversion attack, a retrieval attack, a malicious client and a membership attack."""

import re
from pathlib import Path

import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from privreid.inversion import INVERSION_ATTACKS, InversionSettings, reconstruct
from privreid.data.formats import available_formats, detect_format, load_dataset, unregister_format
from privreid.models import build_model

DOC = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()


def example(title: str) -> str:
    section = DOC.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture()
def csvlist():
    exec(example("A dataset format"), {})
    yield
    unregister_format("csvlist")


def test_the_dataset_format_example(csvlist, tmp_path):
    rows = ["path,pid,camera,split"]
    for split, pid, cam in [("train", 7, 1), ("train", 7, 2), ("train", 9, 1), ("query", 7, 1), ("gallery", 7, 2),
                            ("gallery", 9, 3), ("gallery", -1, 1)]:
        name = f"img/{split}_{pid}_{cam}.png"
        (tmp_path / "img").mkdir(exist_ok=True)
        Image.new("RGB", (8, 16), (pid * 10 % 256, cam * 50, 0)).save(tmp_path / name)
        rows.append(f"{name},{pid},{cam},{split}")
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    assert "csvlist" in available_formats() and detect_format(tmp_path) == "csvlist"
    ds = load_dataset(tmp_path)
    assert sorted((pid, cam) for _, pid, cam in ds.train) == [(0, 0), (0, 1), (1, 0)]
    assert sorted((pid, cam) for _, pid, cam in ds.gallery) == [(7, 1), (9, 2)]  # junk dropped
    from privreid.cli import app

    result = CliRunner().invoke(app, ["data", "info", str(tmp_path), "--format", "csvlist"])
    assert result.exit_code == 0, result.output
    assert "train" in result.output and "gallery" in result.output


@pytest.fixture()
def inversion_attacks():
    with INVERSION_ATTACKS.restoring() as attacks:  # the registry comes back after the test
        yield attacks


def test_the_inversion_attack_example(inversion_attacks):
    exec(example("An inversion attack"), {})
    settings = InversionSettings(attack="idlg-cosine", iterations=2)
    assert (settings.distance, settings.tv_weight) == ("cosine", 1e-3)
    assert INVERSION_ATTACKS["idlg-cosine"].summary == "iDLG label, cosine matching"
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=4, feat_dim=16).eval()
    shared = {n for n, _ in model.named_parameters() if not n.startswith("classifier.")}
    rec = reconstruct(model, torch.rand(3, 32, 16, generator=torch.Generator().manual_seed(0)), 1, threat="full",
                      shared=shared, settings=settings, seed=0)
    assert rec.label_rule is not None and not torch.equal(rec.reconstruction, rec.baseline)


def test_the_public_api_resolves_every_name_lazily():
    import subprocess
    import sys

    import privreid

    for name in privreid.__all__:
        if name != "RETRIEVAL_ATTACKS":  # needs the optional torchattacks, tested in test_retrieval_attacks
            assert getattr(privreid, name) is not None
    assert privreid.register_format.__module__ == "privreid.data.formats"
    assert "idlg" in privreid.INVERSION_ATTACKS and "full" in privreid.THREATS
    with pytest.raises(AttributeError):
        privreid.no_such_name  # noqa: B018
    light = subprocess.run([sys.executable, "-c", "import sys, privreid; print('torch' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert light.stdout.strip() == "False"  # `import privreid` does not import torch


@pytest.fixture()
def rounding():
    from privreid.defenses.registry import get_defense, unregister

    exec(example("A defense"), {})
    yield get_defense("rounding")
    unregister("rounding")


def test_the_defense_example_runs_end_to_end(rounding, tiny_synth, tmp_path, monkeypatch):
    """The toy defense, registered here, trains through the public API and keeps the defense contract."""
    import json

    from conftest import spy_on_uploads, tiny_config
    from test_defense_registry import check_contract

    from privreid import train_run
    from privreid.errors import ConfigError
    from privreid.composition import build_method
    from privreid.federated.strategy import DataVolumeAverage

    cfg = tiny_config(tiny_synth, rounds=1, defenses={"rounding": {"step": 0.05}})
    check_contract(rounding, cfg, tmp_path / "contract")
    rounds = spy_on_uploads(monkeypatch, DataVolumeAverage)
    summary = train_run(cfg, tmp_path / "run", progress=False)
    privacy = json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"]
    assert privacy == summary["privacy"]
    assert privacy["rounding"] == {"step": 0.05} and privacy["defense"] == "parameters rounded to multiples of 0.05"
    assert privacy["notes"] == ["rounding: every parameter a client uploads is a multiple of 0.05"]
    (uploads,) = rounds
    params = {n for n, _ in build_method(cfg).build_model(cfg, initial_weights=False).named_parameters()}
    for upload in uploads:
        for k in params & set(upload.state):
            grid = torch.round(upload.state[k] / 0.05) * 0.05
            assert torch.allclose(upload.state[k], grid, atol=1e-6), k
    with pytest.raises(ConfigError, match="defense 'rounding' has no option stp"):
        build_method(tiny_config(tiny_synth, defenses={"rounding": {"stp": 1}}))
    with pytest.raises(ConfigError, match="step must be > 0"):
        train_run(tiny_config(tiny_synth, defenses={"rounding": {"step": 0}}), tmp_path / "bad", progress=False)
    assert not (tmp_path / "bad").exists()
    from privreid.cli import app

    res = CliRunner().invoke(app, ["methods"])
    assert "rounding: yes" in res.output and "rounding: n/a (nothing is uploaded)" in res.output
    # and through `privreid train`, configured with --set
    tiny = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
            "--device", "cpu", "--quiet", "--test-domains", "synthC", "--data", str(tiny_synth), "--rounds", "1"]
    res = CliRunner().invoke(app, ["train", *tiny, "--set", "robustness.defenses.rounding.step=0.05",
                                   "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "cli" / "summary.json").read_text())["privacy"]["rounding"] == {"step": 0.05}


@pytest.fixture()
def fedmiddle():
    from privreid.federated.registry import get_method, unregister

    exec(example("A federated method"), {})
    yield get_method("fedmiddle")
    unregister("fedmiddle")


def test_the_method_example_averages_the_middle_half_by_update_norm(fedmiddle):
    from privreid.federated.strategy import Upload

    uploads = [Upload(f"c{i}", {"w": torch.full((2,), v), "n": torch.tensor(i)}, 1)
               for i, v in enumerate([3.0, -1.0, 100.0, 2.0])]  # update norms^2 18, 2, 20000, 8: c3 and c0 kept
    result = fedmiddle.make_strategy(None, None).aggregate({"w": torch.zeros(2), "n": torch.tensor(0)}, uploads)
    assert torch.equal(result.global_state["w"], torch.full((2,), 2.5)) and int(result.global_state["n"]) == 3


def test_the_method_example_trains_through_the_cli(fedmiddle, tiny_synth, tmp_path, monkeypatch):
    """The example method, registered here: `privreid train` runs it, the server's global state is the mean of the
    middle uploads (both, for two clients), the strategy keeps the contract, `methods` lists it and secure
    aggregation refuses it."""
    import json

    from conftest import spy_on_uploads
    from test_strategy_contract import check_contract, run_setup

    from privreid.cli import app
    from privreid.checkpoint import load_checkpoint

    _, strategy, clients, global_state, uploads = run_setup(tiny_synth, "fedmiddle")
    result = check_contract(strategy, clients, global_state, uploads)
    key = next(k for k, v in global_state.items() if v.is_floating_point())
    a, b = (u.state[key] for u in uploads)  # two training clients: n // 4 = 0 dropped, the mean of both
    assert not torch.equal(a, b) and torch.equal(result.global_state[key], torch.stack([a, b]).mean(dim=0))

    rounds = spy_on_uploads(monkeypatch, type(strategy))
    tiny = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
            "--device", "cpu", "--quiet", "--test-domains", "synthC", "--data", str(tiny_synth), "--rounds", "1"]
    runner = CliRunner()
    res = runner.invoke(app, ["train", "--method", "fedmiddle", *tiny, "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["method"] == "fedmiddle"
    (received,) = rounds
    ckpt = load_checkpoint(tmp_path / "run" / "ckpt.pt")
    for k, v in ckpt["global_state"].items():
        if v.is_floating_point():
            assert torch.equal(v, torch.stack([u.state[k] for u in received]).mean(dim=0)), k
    assert "fedmiddle" in runner.invoke(app, ["methods"]).output
    res = runner.invoke(app, ["train", "--method", "fedmiddle", *tiny, "--secure-aggregation",
                              "--out", str(tmp_path / "secure")])
    assert res.exit_code == 2 and res.output.startswith("error:") and len(res.output.strip().splitlines()) == 1, \
        res.output
    assert not (tmp_path / "secure").exists()


@pytest.fixture()
def closest():
    from privreid.defenses.registry import get_defense, unregister

    exec(example("An aggregation rule"), {})
    yield get_defense("robust-closest")
    unregister("robust-closest")


def test_the_aggregation_rule_example_replaces_fedpavs_plain_mean(closest, tiny_synth, tmp_path, monkeypatch):
    """The robust rule, registered here: the mean of the k uploads closest to the median, on the server of a FedPav
    run; recorded, listed, and refused for a k the rounds cannot take."""
    import json

    import numpy as np

    from conftest import spy_on_uploads, tiny_config

    from privreid import train_run
    from privreid.checkpoint import load_checkpoint
    from privreid.cli import app
    from privreid.defenses.robust.rules import RobustAggregate
    from privreid.errors import ConfigError

    rule = closest.rule(tiny_config(tiny_synth, defenses={"robust-closest": {"k": 2}}))
    uploads = [([np.array([v, v]), np.array([0.0])], 1) for v in (0.0, 1.0, 2.0, 100.0)]  # median 1.5
    assert [a.tolist() for a in rule(uploads)] == [[1.5, 1.5], [0.0]]

    rounds = spy_on_uploads(monkeypatch, RobustAggregate)
    summary = train_run(tiny_config(tiny_synth, rounds=1, defenses={"robust-closest": {"k": 1}}), tmp_path / "run",
                        progress=False)
    assert summary["privacy"]["server_defenses"] == {"robust-closest": {"k": 1}}
    (received,) = rounds
    state = load_checkpoint(tmp_path / "run" / "ckpt.pt")["global_state"]
    floating = [k for k, v in state.items() if v.is_floating_point()]
    assert any(all(torch.equal(state[k], u.state[k]) for k in floating) for u in received)  # k = 1: one upload
    assert "robust-closest: yes" in CliRunner().invoke(app, ["methods"]).output
    with pytest.raises(ConfigError, match=r"k must be in 1\.\.2"):
        train_run(tiny_config(tiny_synth, defenses={"robust-closest": {"k": 3}}), tmp_path / "bad", progress=False)
    assert not (tmp_path / "bad").exists()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"] == summary["privacy"]


def test_the_retrieval_attack_example():
    pytest.importorskip("torchattacks")
    from privreid.retrieval_attacks import retrieval_attack_names
    from privreid.retrieval_attacks.feature_attacks import RETRIEVAL_ATTACKS, build_attack
    from privreid.retrieval_attacks.retrieval import attack_label, resolve_methods

    with RETRIEVAL_ATTACKS.restoring():
        exec(example("A retrieval attack"), {})
        assert "eot-bim" in resolve_methods("all") and "eot-bim" in retrieval_attack_names()
        assert attack_label("eot-bim") == "EOT-BIM"
        torch.manual_seed(0)
        model = build_model("resnet18", num_classes=0, feat_dim=16).eval()
        images = torch.rand(2, 3, 32, 16, generator=torch.Generator().manual_seed(0))
        adv = build_attack("eot-bim", model, eps=8 / 255, steps=2).perturb(images)
        assert adv.shape == images.shape and 0 < float((adv - images).abs().max()) <= 8 / 255 + 1e-6
        assert 0 <= float(adv.min()) and float(adv.max()) <= 1


def test_the_malicious_client_example_trains_with_it(tiny_synth, tmp_path):
    from types import SimpleNamespace

    from conftest import tiny_config

    from privreid import train_run
    from privreid.errors import ConfigError
    from privreid.malicious_clients import MALICIOUS_CLIENTS, get_malicious_client

    with MALICIOUS_CLIENTS.restoring():
        exec(example("A malicious client"), {})
        gaussian = get_malicious_client("gaussian")
        layer = torch.nn.Linear(3, 2)
        before = [p.detach().clone() for p in layer.parameters()]
        gaussian.poison_upload(SimpleNamespace(model=layer, global_state={}), {"std": 0.5})
        assert all(not torch.equal(a, b) for a, b in zip(before, layer.parameters()))
        cfg = tiny_config(tiny_synth, rounds=1, adversary={"name": "gaussian", "malicious": 1, "std": 0.5})
        record = train_run(cfg, tmp_path / "run", progress=False)["adversary"]
        assert record["attack"] == "gaussian" and record["options"] == {"std": 0.5}
        assert len(record["malicious_clients"]) == 1
        with pytest.raises(ConfigError, match="adversary 'gaussian' has no option sd"):
            train_run(tiny_config(tiny_synth, adversary={"name": "gaussian", "sd": 1}), tmp_path / "bad",
                      progress=False)
        assert not (tmp_path / "bad").exists()


def test_the_membership_attack_example():
    import numpy as np

    from privreid.auditing.membership import Candidate, MembershipSet
    from privreid.auditing.membership_attacks import MEMBERSHIP_ATTACKS, resolve_attacks
    from privreid.auditing.statistics import ProbeOutputs
    from privreid.errors import ConfigError

    with MEMBERSHIP_ATTACKS.restoring():
        exec(example("A membership attack"), {})
        attack = MEMBERSHIP_ATTACKS["top-posterior"]
        assert resolve_attacks(["top-posterior"]) == [attack] and attack in resolve_attacks(["all"])
        ms = MembershipSet("image", None, "test", [Candidate("a", True, "s/train/0", ["p0", "p1"], 0),
                                                   Candidate("b", False, "s/test/1", ["p2"], None)])
        out = ProbeOutputs(np.eye(3), np.log(np.array([[0.9, 0.1], [0.7, 0.3], [0.5, 0.5]])),
                           {"p0": 0, "p1": 1, "p2": 2})
        scored = attack.score(ms, out)
        assert np.allclose(scored.scores, [0.8, 0.5]) and scored.statistic == "top softmax probability"
        with pytest.raises(ConfigError, match="needs the model's classifier head"):
            attack.score(ms, ProbeOutputs(out.feats, None, out.index))


def test_every_extension_kind_has_a_home_with_a_tested_example():
    """docs/extending.md: one section per extension kind, each with a Python example this module runs."""
    for title in ("A dataset format", "A federated method", "An aggregation rule", "A defense",
                  "An inversion attack", "A retrieval attack", "A malicious client", "A membership attack"):
        assert example(title), title
        assert f"example(\"{title}\")" in Path(__file__).read_text(), title
    assert "## A metric\n" in DOC
