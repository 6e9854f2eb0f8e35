"""Issue 27: every evaluation path takes a model privreid did not train (CLI and Python API give the same numbers)."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision
from torch import nn

import privreid
from badinput import assert_one_error_line, run_cli, tree_digest
from model_files import H, W, save_fastreid, save_torchreid, torchreid_parts
from privreid.errors import ConfigError
from privreid.models.adapter import ReIDAdapter

TINY_ATTACK = ("--method", "fgsm,pgd", "--steps", "2", "--max-queries", "4", "--examples", "0", "--device", "cpu")


@pytest.fixture(scope="module")
def fedpav_run(tiny_synth, tmp_path_factory):
    """A tiny trained FedPav run (32x16 input, seen domains synthA/B, unseen synthC)."""
    from conftest import tiny_config

    out = tmp_path_factory.mktemp("any-model") / "fedpav"
    privreid.train_run(tiny_config(tiny_synth, rounds=1), out)
    return out


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """A torchreid-layout and a fast-reid-layout checkpoint, built with those projects' key names."""
    root = tmp_path_factory.mktemp("files")
    return {"torchreid": save_torchreid(root / "model.pth.tar-60"), "fastreid": save_fastreid(root / "model_final.pth")}


@pytest.mark.parametrize("kind", ["torchreid", "fastreid"])
def test_attack_takes_a_file_from_elsewhere_and_matches_the_api(kind, model_files, tiny_synth, tmp_path):
    """`privreid attack --model FILE --data` prints the load line, records it in models.json, and gives the
    numbers privreid.attack gives on the same file."""
    out = tmp_path / "attack"
    res = run_cli(("attack", "--model", str(model_files[kind]), "--height", str(H), "--width", str(W),
                   "--data", str(tiny_synth), "--domains", "synthC", "--eps", "8/255", "--alpha", "2/255",
                   *TINY_ATTACK, "--out", str(out)))
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith(f"loaded {'torchreid' if kind == 'torchreid' else 'fast-reid'} checkpoint")
    recorded = json.loads((out / "models.json").read_text())
    assert recorded[0]["path"] == str(model_files[kind]) and recorded[0]["mapped"] > 0
    cli = {r["attack"]: r for r in json.loads((out / "results.json").read_text())["results"]}
    api = privreid.attack(model_files[kind], str(tiny_synth), method=["fgsm", "pgd"], eps=8 / 255, alpha=2 / 255,
                          steps=2, max_queries=4, height=H, width=W)
    rows = [row for row in api.rows if row.testset == "synthC"]
    assert {row.method for row in rows} == {"fgsm", "pgd"}
    for row in rows:
        assert row.attacked["mAP"] == pytest.approx(cli[row.method]["mAP"], abs=1e-9)
        assert row.clean["rank1"] == pytest.approx(cli[row.method]["clean_rank1"], abs=1e-9)
        assert row.drop["mAP"] == pytest.approx((row.clean["mAP"] - row.attacked["mAP"]) / row.clean["mAP"])
    assert api.to_dict()["rows"][0]["method"] in {"fgsm", "pgd"}


def test_compare_ranks_files_from_elsewhere_beside_a_fedpav_checkpoint(fedpav_run, model_files, tiny_synth, tmp_path):
    """One compare table: the FedPav run's test sets, its untrained row, and each file at its own input size,
    scored exactly as privreid.evaluate scores it."""
    table = tmp_path / "table.md"
    res = run_cli(("compare", str(fedpav_run / "ckpt.pt"), str(model_files["torchreid"]),
                   str(model_files["fastreid"]), "--height", str(H), "--width", str(W), "--device", "cpu",
                   "--markdown", str(table)))
    assert res.exit_code == 0, res.stderr
    lines = table.read_text().splitlines()
    names = [line.split("|")[1].strip() for line in lines[2:]]
    assert names == ["untrained", "fedpav (fedpav)", "model.pth.tar-60 (torchreid checkpoint)",
                     "model_final.pth (fast-reid checkpoint)"]
    want = privreid.evaluate(model_files["torchreid"], str(tiny_synth), height=H, width=W)
    unseen = [cell.strip() for cell in lines[4].split("|")]
    header = [cell.strip() for cell in lines[0].split("|")]
    assert float(unseen[header.index("unseen mAP")]) == pytest.approx(100 * want.testsets["synthC"]["mAP"], abs=0.06)


def test_compare_suite_attacks_and_corruptions_on_a_file_but_not_inversion(model_files, tiny_synth, tmp_path):
    out = tmp_path / "report"
    res = run_cli(("compare", str(model_files["torchreid"]), "--data", str(tiny_synth), "--height", str(H),
                   "--width", str(W), "--suite", "clean,attacks,corruptions", "--attacks", "fgsm", "--steps", "1",
                   "--max-queries", "4", "--corruptions", "noise", "--repeats", "2", "--device", "cpu", "--quiet",
                   "--out", str(out)))
    assert res.exit_code == 0, res.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["models"][0]["kind"] == "torchreid checkpoint"
    assert json.loads((out / "models.json").read_text())[0]["kind"] == "torchreid checkpoint"
    before = tree_digest(tmp_path)
    res = run_cli(("compare", str(model_files["torchreid"]), "--data", str(tiny_synth), "--suite", "inversion",
                   "--out", str(tmp_path / "inv"), "--device", "cpu"))
    assert_one_error_line(res, "the inversion suite needs a privreid checkpoint")
    assert tree_digest(tmp_path) == before


def test_a_file_without_data_or_gradients_is_refused_in_one_line(model_files, tiny_synth, tmp_path):
    before = tree_digest(tmp_path)
    res = run_cli(("compare", str(model_files["torchreid"]), "--height", str(H), "--width", str(W)))
    assert_one_error_line(res, "records no data, give --data")
    res = run_cli(("attack", "--model", str(model_files["fastreid"]), *TINY_ATTACK, "--out", str(tmp_path / "a")))
    assert_one_error_line(res, "records no data, give --data")
    assert tree_digest(tmp_path) == before


def test_onnx_is_refused_by_the_gradient_commands(fedpav_run, tiny_synth, tmp_path):
    for name in ("onnx", "onnxruntime"):
        pytest.importorskip(name)
    res = run_cli(("export", "--model", str(fedpav_run / "ckpt.pt"), "--format", "onnx", "--out",
                   str(tmp_path / "m.onnx")))
    assert res.exit_code == 0, res.stderr
    before = tree_digest(tmp_path)
    res = run_cli(("attack", "--model", str(tmp_path / "m.onnx"), "--data", str(tiny_synth), *TINY_ATTACK,
                   "--out", str(tmp_path / "a")))
    assert_one_error_line(res, "privreid attack needs gradients through the model")
    assert tree_digest(tmp_path) == before
    with pytest.raises(ConfigError, match="attacks need gradients through the model"):
        privreid.attack(tmp_path / "m.onnx", str(tiny_synth))


def test_every_export_ranks_as_the_checkpoint(fedpav_run, tiny_synth, tmp_path):
    """The round trip of issue 27: each export of a tiny FedPav model, through `privreid eval`, gives the
    checkpoint's metrics (torchreid's layout ends its fc block with a ReLU, so its file is the ReLU of the
    features: the test compares it with that model)."""
    formats = ["state-dict", "torchreid"] + (["onnx"] if _has_onnx() else [])

    def eval_json(model, name):
        path = tmp_path / f"{name}.json"
        res = run_cli(("eval", "--model", str(model), "--data", str(tiny_synth), "--device", "cpu",
                       "--json", str(path)))
        assert res.exit_code == 0, res.stderr
        return {row["testset"]: row for row in json.loads(path.read_text())}

    keys = ("rank1", "rank5", "mAP", "mINP")
    want = eval_json(fedpav_run / "ckpt.pt", "ckpt")
    relu = privreid.load_model(fedpav_run / "ckpt.pt").eval()
    want_relu = privreid.evaluate(ReIDAdapter(nn.Sequential(relu, nn.ReLU()), height=H, width=W),
                                  str(tiny_synth)).testsets
    for fmt in formats:
        res = run_cli(("export", "--model", str(fedpav_run / "ckpt.pt"), "--format", fmt, "--out",
                       str(tmp_path / f"model.{fmt}")))
        assert res.exit_code == 0, res.stderr
        got = eval_json(tmp_path / f"model.{fmt}", fmt)
        assert set(got) == set(want)
        for testset, row in got.items():
            expected = want_relu[testset] if fmt == "torchreid" else want[testset]
            for key in keys:
                assert row[key] == pytest.approx(expected[key], abs=1e-6 if fmt != "onnx" else 1e-3), (fmt, key)


def _has_onnx() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) for name in ("onnx", "onnxscript", "onnxruntime"))


def test_python_api_on_a_wrapped_torchvision_model_is_typed_and_quiet(tiny_synth, capsys):
    """corrupt / invert / audit take an nn.Module wrapped in an adapter, return dataclasses, print nothing."""
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None, num_classes=4)
    classifier = net.fc
    net.fc = nn.Identity()
    model = ReIDAdapter(net.eval(), height=H, width=W, classifier=classifier)
    corrupted = privreid.corrupt(model, str(tiny_synth), corruptions="noise", repeats=2)
    numbers = corrupted.testsets["synthC"]
    assert set(numbers.clean) >= {"rank1", "mAP"} and 0 <= numbers.mean["mAP"] <= 1
    assert corrupted.to_dict()["repeats"] == 2

    images = torch.rand(2, 3, H, W, generator=torch.Generator().manual_seed(3))
    inverted = privreid.invert(model, images, [1, 2], method="idlg", iterations=3)
    assert inverted.reconstructions.shape == (2, 3, H, W)
    assert [s["label_correct"] for s in inverted.subjects] == [True, True]  # iDLG reads the label off the head
    assert inverted.summary["subjects"] == 2 and "psnr" in inverted.to_dict()["summary"]["attack"]

    from privreid.data.catalog import resolve_datasets

    train = resolve_datasets([str(tiny_synth)])["synthA"].train
    audited = privreid.audit(model, train[:6], train[6:12], attack="feature", bootstrap=0)
    assert audited.members == 6 and audited.nonmembers == 6 and 0 <= audited.auc <= 1
    assert audited.statistic == "prototype margin"
    assert capsys.readouterr() == ("", "")
    with pytest.raises(ConfigError, match="both a member and a non-member"):
        privreid.audit(model, train[:2], train[:1], level="identity")
    with pytest.raises(ConfigError, match="no classifier"):
        privreid.audit(ReIDAdapter(net, height=H, width=W), train[:2], train[2:4], attack="loss")
    with pytest.raises(ConfigError, match="needs gradients and a classifier|the model needs"):
        privreid.invert(ReIDAdapter(net, height=H, width=W), images, [0, 1])


def test_the_torchreid_classifier_reaches_the_inversion_threat(tmp_path):
    """A torchreid checkpoint's classifier is the head of the `full` threat's client step."""
    checkpoint, reference, classifier = torchreid_parts()
    torch.save(checkpoint, tmp_path / "model.pth.tar-60")
    images = torch.rand(1, 3, H, W, generator=torch.Generator().manual_seed(1))
    result = privreid.invert(tmp_path / "model.pth.tar-60", images, [3], method="idlg", iterations=2, height=H,
                             width=W)
    assert result.subjects[0]["label_correct"] is True


def test_invert_and_audit_take_a_torchreid_file(model_files, tiny_synth, tmp_path):
    """`privreid invert` attacks a file's own classifier under the full threat (labels: the model's predictions);
    `privreid audit` scores its training identities against its test identities, as privreid.audit does."""
    path = str(model_files["torchreid"])
    size = ("--height", str(H), "--width", str(W))
    res = run_cli(("invert", "--model", path, *size, "--data", str(tiny_synth), "--subjects", "2", "--method", "idlg",
                   "--iterations", "2", "--device", "cpu", "--out", str(tmp_path / "inv")))
    assert res.exit_code == 0, res.stderr
    metrics = json.loads((tmp_path / "inv" / "metrics.json").read_text())
    assert [s["label_source"] for s in metrics["subjects"]] == ["predicted by the model"] * 2
    assert metrics["settings"]["threat"] == "full" and metrics["settings"]["model"]["kind"] == "torchreid checkpoint"
    assert (tmp_path / "inv" / "grid.png").is_file() and (tmp_path / "inv" / "models.json").is_file()

    res = run_cli(("audit", "--models", path, *size, "--data", str(tiny_synth), "--method", "feature,loss",
                   "--bootstrap", "0", "--device", "cpu", "--out", str(tmp_path / "audit")))
    assert res.exit_code == 0, res.stderr
    records = json.loads((tmp_path / "audit" / "audit.json").read_text())["records"]
    assert [(r["level"], r["attack"]) for r in records] == [("identity", "feature"), ("identity", "loss")]
    from privreid.auditing.given import split_membership
    from privreid.data.catalog import resolve_datasets

    members, nonmembers = split_membership(resolve_datasets([str(tiny_synth)]))
    api = privreid.audit(path, members, nonmembers, level="identity", attack="feature", bootstrap=0, height=H,
                         width=W)
    assert records[0]["auc"] == pytest.approx(api.auc) and records[0]["members"] == api.members


def test_commands_that_need_a_classifier_or_a_run_say_so(tiny_synth, tmp_path, model_files):
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), tmp_path / "rn18.pth")
    plain = (str(tmp_path / "rn18.pth"), "--arch", "resnet18", "--height", str(H), "--width", str(W))
    before = tree_digest(tmp_path)
    cases = [
        (("invert", "--model", *plain, "--data", str(tiny_synth), "--out", str(tmp_path / "o")),
         "privreid invert needs an identity classifier"),
        (("invert", "--model", str(model_files["torchreid"]), "--threat", "shared", "--data", str(tiny_synth),
          "--out", str(tmp_path / "o")), "--threat shared observes a federated client's shared update"),
        (("audit", "--models", *plain, "--data", str(tiny_synth), "--out", str(tmp_path / "o")),
         "the loss attack needs an identity classifier"),
        (("audit", "--models", *plain, "--method", "feature", "--out", str(tmp_path / "o")),
         "records no training data: give --data"),
        (("audit", "--models", *plain, "--method", "lira", "--data", str(tiny_synth), "--out", str(tmp_path / "o")),
         "--method lira"),
    ]
    for args, says in cases:
        assert_one_error_line(run_cli(args), says)
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("kind", ["torchreid", "fastreid"])
def test_eval_takes_the_normalisation_from_flags_where_the_file_records_none(kind, model_files, tiny_synth, tmp_path):
    def cli_map(*flags):
        out = tmp_path / f"eval{len(flags)}.json"
        res = run_cli(("eval", "--model", str(model_files[kind]), "--height", str(H), "--width", str(W), *flags,
                       "--data", str(tiny_synth), "--domains", "synthC", "--device", "cpu", "--json", str(out)))
        assert res.exit_code == 0, res.stderr
        return res.stdout.splitlines()[0], json.loads(out.read_text())[0]["mAP"]

    line, halves = cli_map("--mean", "0.5,0.5,0.5", "--std", "0.5,0.5,0.5")
    assert "mean/std [0.5, 0.5, 0.5]/[0.5, 0.5, 0.5] (argument)" in line
    api = privreid.evaluate(model_files[kind], str(tiny_synth), height=H, width=W, mean=[0.5] * 3, std=[0.5] * 3)
    assert halves == pytest.approx(api.testsets["synthC"]["mAP"], abs=1e-9)
    _, imagenet = cli_map()
    assert imagenet == pytest.approx(privreid.evaluate(model_files[kind], str(tiny_synth), height=H,
                                                       width=W).testsets["synthC"]["mAP"], abs=1e-9)
    assert_one_error_line(run_cli(("eval", "--model", str(model_files[kind]), "--mean", "1,2", "--data",
                                   str(tiny_synth))), "--mean takes three comma-separated numbers")
