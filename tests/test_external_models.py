"""Loading models privreid did not train (privreid.models.external), the adapter contract, privreid.evaluate."""

from __future__ import annotations

import importlib.util
import pickle

import pytest
import torch
import torchvision
from torch import nn

import privreid
from privreid.errors import CheckpointError, ConfigError
from privreid.models.adapter import ReIDAdapter
from privreid.models.external import load_any_model

from model_files import H, W, fastreid_parts, torchreid_parts
from model_files import images as _images
from model_files import normalised as _normalised
from model_files import randomise_bn as _randomise_bn
from model_files import trunk as _trunk



def _assert_same(adapter: ReIDAdapter, reference: nn.Module) -> None:
    images = _images()
    with torch.no_grad():
        got, want = adapter.features_of(images), reference(_normalised(images))
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # the module privreid's pipeline runs: ImageNet-normalised input
        torch.testing.assert_close(adapter.as_module().eval()(_normalised(images)), want, atol=1e-5, rtol=1e-5)


def test_torchvision_state_dict(tmp_path):
    trunk = _trunk()
    state = torchvision.models.resnet18(weights=None).state_dict()
    state.update(trunk.state_dict())
    torch.save(state, tmp_path / "rn18.pth")
    adapter = load_any_model(tmp_path / "rn18.pth", arch="resnet18", height=H, width=W)
    _assert_same(adapter, trunk)
    assert adapter.classifier is None
    line = adapter.report.line()
    assert "torchvision" in line and "fc.weight" in line and "not an identity classifier" in line
    with pytest.raises(CheckpointError, match="resnet18 trunk, not the resnet50"):
        load_any_model(tmp_path / "rn18.pth", arch="resnet50")


def test_torchreid_checkpoint(tmp_path):
    checkpoint, reference, classifier = torchreid_parts()
    torch.save(checkpoint, tmp_path / "model.pth.tar-60")
    adapter = load_any_model(tmp_path / "model.pth.tar-60", height=H, width=W, last_stride=2)
    _assert_same(adapter, reference)
    images = _images()
    with torch.no_grad():
        torch.testing.assert_close(adapter.logits(images), classifier(reference(_normalised(images))))
    report = adapter.report.to_dict()
    assert report["kind"] == "torchreid checkpoint" and report["mapped"] == len(checkpoint["state_dict"])
    assert "32x16 (argument)" in adapter.report.line() and "ImageNet (torchreid default)" in adapter.report.line()


def test_fastreid_checkpoint(tmp_path):
    checkpoint, reference, _ = fastreid_parts()
    torch.save(checkpoint, tmp_path / "model_final.pth")
    adapter = load_any_model(tmp_path / "model_final.pth", height=H, width=W)
    _assert_same(adapter, reference)
    assert adapter.classifier.out_features == 7
    assert "BNNeck" in adapter.report.line() and "fast-reid default" in adapter.report.line()
    state = checkpoint["model"]
    state["heads.pool_layer.p"] = torch.tensor([3.0])  # GeM pooling: not mapped, named
    torch.save({"model": state}, tmp_path / "gem.pth")
    with pytest.raises(CheckpointError, match="heads.pool_layer.p"):
        load_any_model(tmp_path / "gem.pth")


def test_torchscript(tmp_path):
    trunk = _trunk()
    with pytest.warns(FutureWarning):
        traced = torch.jit.trace(trunk, _normalised(_images()))
    traced.save(str(tmp_path / "model.ts"))
    adapter = load_any_model(tmp_path / "model.ts", height=H, width=W)
    _assert_same(adapter, trunk)
    assert adapter.report.kind == "TorchScript"


def test_onnx(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    trunk = _trunk()
    from privreid.export import _quiet

    with _quiet():
        torch.onnx.export(trunk, (_normalised(_images()),), str(tmp_path / "m.onnx"), dynamo=False,
                          input_names=["images"], output_names=["features"],
                          dynamic_axes={"images": {0: "batch"}, "features": {0: "batch"}})
    adapter = load_any_model(tmp_path / "m.onnx", height=H, width=W)
    assert adapter.differentiable is False
    with torch.no_grad():
        torch.testing.assert_close(adapter.features_of(_images()), trunk(_normalised(_images())),
                                   atol=1e-4, rtol=1e-4)


class _Marker:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_malicious_pickle_is_refused_without_executing(tmp_path):
    marker = tmp_path / "executed"
    torch.save({"state_dict": {"conv1.weight": torch.zeros(1)}, "payload": _Marker(marker)}, tmp_path / "evil.pth")
    with pytest.raises(CheckpointError, match="builtins.open|io.open") as err:
        load_any_model(tmp_path / "evil.pth")
    assert "nothing was executed" in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps(_Marker(marker)))
    with pytest.raises(CheckpointError):
        load_any_model(tmp_path / "evil.pkl")
    assert not marker.exists()


def test_random_bytes_give_one_line(tmp_path):
    (tmp_path / "noise.pth").write_bytes(bytes(range(256)) * 8)
    with pytest.raises(CheckpointError) as err:
        load_any_model(tmp_path / "noise.pth")
    assert "is not a model file privreid reads" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(CheckpointError, match="not found"):
        load_any_model(tmp_path / "missing.pth")
    if importlib.util.find_spec("onnxruntime") is not None:
        (tmp_path / "noise.onnx").write_bytes(bytes(range(256)) * 8)
        with pytest.raises(CheckpointError, match="not an ONNX model onnxruntime can run") as err:
            load_any_model(tmp_path / "noise.onnx")
        assert "\n" not in str(err.value)


def test_adapter_contract():
    trunk = _trunk()
    named = ReIDAdapter(nn.Sequential(trunk, nn.Linear(512, 3)), features="0", height=H, width=W)
    _assert_same(named, trunk)  # a named layer's output, read with a forward hook
    with pytest.raises(ConfigError, match="no identity classifier"):
        named.logits(_images())
    with pytest.raises(ConfigError, match="no layer named"):
        ReIDAdapter(trunk, features="nope")
    with pytest.raises(ConfigError, match="takes 32x16 images"):
        named.features_of(torch.rand(1, 3, 8, 8))


def test_evaluate_matches_evaluate_model(tiny_synth):
    from privreid.data.catalog import resolve_datasets
    from privreid.data.partition import as_test_set
    from privreid.models import build_model

    torch.manual_seed(0)
    model = build_model(arch="resnet18", feat_dim=32, num_classes=0).eval()
    got = privreid.evaluate(model, str(tiny_synth), height=H, width=W)
    datasets = resolve_datasets([str(tiny_synth)])
    assert set(got.testsets) == set(datasets)
    for name, ds in datasets.items():
        want = privreid.evaluate_model(model, as_test_set(name, ds), height=H, width=W)
        assert got.testsets[name]["mAP"] == pytest.approx(want["mAP"], abs=1e-6)
        assert got.to_dict()["testsets"][name]["rank1"] == pytest.approx(want["rank1"], abs=1e-6)


def _privreid_model() -> nn.Module:
    from privreid.models import build_model

    torch.manual_seed(0)
    return _randomise_bn(build_model(arch="resnet18", feat_dim=32, num_classes=5))


@pytest.mark.parametrize("fmt", ["state-dict", "torchreid", "onnx"])
def test_privreid_exports_load_with_their_recorded_input(tmp_path, fmt):
    """Each export gives the model's features (torchreid's: relu of them, its fc block ends with a ReLU) at the
    recorded 32x16 input, with no size given."""
    if fmt == "onnx":
        for name in ("onnx", "onnxscript", "onnxruntime"):
            pytest.importorskip(name)
    from privreid.export import export_model

    model = _privreid_model()
    export_model(model, fmt, tmp_path / f"model.{fmt}", height=H, width=W)
    adapter = load_any_model(tmp_path / f"model.{fmt}")
    assert (adapter.height, adapter.width) == (H, W) and "32x16 (file)" in adapter.report.line()
    expected = {"state-dict": model, "torchreid": nn.Sequential(model, nn.ReLU()), "onnx": model}[fmt]
    with torch.no_grad():
        want = expected(_normalised(_images()))
        torch.testing.assert_close(adapter.features_of(_images()), want, atol=1e-4, rtol=1e-4)
    if fmt != "onnx":
        with torch.no_grad():
            torch.testing.assert_close(adapter.logits(_images()), adapter.classifier(want))


def test_torchscript_archive_with_a_smuggled_pickle_is_refused(tmp_path):
    """A TorchScript archive whose constants.pkl names a non-torch global is refused before torch.jit.load."""
    import zipfile

    with pytest.warns(FutureWarning):
        traced = torch.jit.trace(nn.Linear(3, 2), torch.zeros(1, 3))
    traced.save(str(tmp_path / "clean.ts"))
    marker = tmp_path / "executed"
    with zipfile.ZipFile(tmp_path / "clean.ts") as src, zipfile.ZipFile(tmp_path / "evil.ts", "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            dst.writestr(item, pickle.dumps(_Marker(marker)) if item.filename.endswith("constants.pkl") else data)
    with pytest.raises(CheckpointError, match="name the global (builtins|io).open"):
        load_any_model(tmp_path / "evil.ts")
    assert not marker.exists()


def test_a_foreign_file_is_read_by_torch_load_once(tmp_path, monkeypatch):
    """A torchreid file given where a privreid checkpoint may be (``eval --model``) is read once: one read tells
    its kind and feeds its loader."""
    from privreid.models.evaluated import load_evaluated_models

    checkpoint, _, _ = torchreid_parts()
    torch.save(checkpoint, tmp_path / "model.pth.tar-60")
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: calls.append(args) or real_load(*args, **kwargs))
    [model] = load_evaluated_models([tmp_path / "model.pth.tar-60"], height=H, width=W, last_stride=2)
    assert model.kind == "torchreid checkpoint" and len(calls) == 1
    calls.clear()
    load_any_model(tmp_path / "model.pth.tar-60", height=H, width=W, last_stride=2)
    assert len(calls) == 1


def test_privreid_checkpoint_loads_its_global_model(tiny_synth, tmp_path):
    from conftest import tiny_config

    privreid.train_run(tiny_config(tiny_synth, rounds=1), tmp_path / "run")
    model = privreid.load_model(tmp_path / "run" / "ckpt.pt").eval()
    adapter = load_any_model(tmp_path / "run" / "ckpt.pt")
    assert (adapter.height, adapter.width) == (H, W)
    assert adapter.report.kind.startswith("privreid checkpoint (fedpav")
    _assert_same(adapter, model)


def test_privreid_eval_ranks_a_torchvision_state_dict_like_the_python_api(tmp_path, tiny_synth):
    """Issue 27, 1: `privreid eval --model FILE --arch` takes a model privreid did not train, prints the load
    report in one line and ranks exactly as privreid.evaluate."""
    import json

    from badinput import run_cli

    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), tmp_path / "rn18.pth")
    res = run_cli(("eval", "--model", str(tmp_path / "rn18.pth"), "--arch", "resnet18", "--height", "32",
                   "--width", "16", "--data", str(tiny_synth), "--domains", "synthC", "--device", "cpu",
                   "--json", str(tmp_path / "eval.json")))
    assert res.exit_code == 0, res.stderr
    assert "torchvision" in res.stdout.splitlines()[0]
    row = json.loads((tmp_path / "eval.json").read_text())[0]
    want = privreid.evaluate(tmp_path / "rn18.pth", str(tiny_synth), arch="resnet18", height=32, width=16)
    assert row["mAP"] == pytest.approx(want.testsets["synthC"]["mAP"], abs=1e-6)
    for args, says in (((), "it records no data, give --data"), (("--data", str(tiny_synth), "--client", "a"),
                                                                "--client picks a personalised model")):
        res = run_cli(("eval", "--model", str(tmp_path / "rn18.pth"), *args))
        assert res.exit_code == 2 and says in res.stderr, res.stderr
