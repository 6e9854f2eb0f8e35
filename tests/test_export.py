"""``privreid export``: each format round-trips (plain torch, torchreid's ResNet, onnxruntime) to privreid's features."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys

import pytest
import torch
from typer.testing import CliRunner

from privreid.checkpoint import load_checkpoint, load_model
from privreid.cli import app
from privreid.errors import ConfigError
from privreid.export import export_model
from privreid.models import build_model, load_weights_file

runner = CliRunner()
TINY = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--device", "cpu", "--quiet", "--test-domains", "synthC", "--rounds", "1"]
CLIENT = "synthA"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def ckpts(tiny_synth, tmp_path_factory):
    """A FedPav run (global model + per-client classifiers) and a BNNeck one, one round each."""
    root = tmp_path_factory.mktemp("export-runs")
    paths = {}
    for name, extra in (("linear", []), ("bnneck", ["--neck", "bnneck"])):
        res = invoke("train", "--method", "fedpav", "--data", tiny_synth, *TINY, *extra, "--out", root / name)
        assert res.exit_code == 0, res.output
        paths[name] = root / name / "ckpt.pt"
    return paths


@pytest.fixture(scope="module")
def images():
    return torch.randn(5, 3, 32, 16, generator=torch.Generator().manual_seed(3))


def features(model, x):
    with torch.no_grad():
        return model.eval()(x)


def export(ckpt, fmt, out, *extra):
    res = invoke("export", "--model", ckpt, "--format", fmt, "--out", out, *extra)
    assert res.exit_code == 0, res.output
    return res.output


def torchreid_resnet():
    """torchreid's own ``models/resnet.py`` from the installed distribution (test extra).

    Loaded by file so that torchreid's package ``__init__`` (dataset downloaders
    needing gdown / tensorboard) is not imported; the file itself imports only torch.
    """
    dist = importlib.metadata.distribution("torchreid")
    for rel in ("torchreid/reid/models/resnet.py", "torchreid/models/resnet.py"):  # PyPI's layout, the repo's
        path = dist.locate_file(rel)
        if path.is_file():
            spec = importlib.util.spec_from_file_location("torchreid_resnet", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise AssertionError("torchreid is installed but has no models/resnet.py")


@pytest.mark.parametrize("client", [None, CLIENT])
def test_state_dict_loads_with_plain_torch_and_gives_privreid_features(ckpts, tmp_path, images, client):
    out = tmp_path / "model.pt"
    export(ckpts["linear"], "state-dict", out, *(["--client", client] if client else []))
    payload = torch.load(out, weights_only=True)  # plain tensors and primitives only
    assert payload["input"]["height"] == 32 and payload["input"]["width"] == 16
    assert payload["input"]["mean"] == pytest.approx([0.485, 0.456, 0.406])
    assert payload["source"]["model"] == ("global" if client is None else f"client {client}")
    rebuilt = build_model(**payload["model_config"])
    rebuilt.load_state_dict(payload["state_dict"], strict=True)
    reference = load_model(ckpts["linear"], client=client)
    assert torch.equal(features(rebuilt, images), features(reference, images))
    if client is not None:  # the personalised model keeps its classifier
        assert rebuilt.num_classes == load_checkpoint(ckpts["linear"])["client_classes"][client] > 0
    # privreid train --weights reads the same file
    fresh = build_model(**{**payload["model_config"], "num_classes": 0})
    load_weights_file(fresh, out)
    assert torch.equal(features(fresh, images), features(reference, images))


@pytest.mark.parametrize("client", [None, CLIENT])
def test_torchreid_resnet_loads_strictly_and_gives_relu_of_privreid_features(ckpts, tmp_path, images, client):
    out = tmp_path / "model.pth.tar"
    text = export(ckpts["linear"], "torchreid", out, *(["--client", client] if client else []))
    assert "relu(privreid's feature)" in text
    payload = torch.load(out, weights_only=True)
    tr = payload["torchreid"]
    assert tr == {"arch": "resnet18", "last_stride": 1, "fc_dims": [32],
                  "num_classes": 0 if client is None else load_checkpoint(ckpts["linear"])["client_classes"][client]}
    resnet = torchreid_resnet()
    model = resnet.ResNet(num_classes=max(tr["num_classes"], 1), loss="softmax", block=resnet.BasicBlock,
                          layers=[2, 2, 2, 2], last_stride=tr["last_stride"], fc_dims=tr["fc_dims"])
    state = payload["state_dict"]
    if not tr["num_classes"]:  # the global model has no classifier: keep torchreid's own
        state = {**state, **{k: v for k, v in model.state_dict().items() if k.startswith("classifier.")}}
    model.load_state_dict(state, strict=True)
    reference = load_model(ckpts["linear"], client=client)
    want = torch.relu(features(reference, images))
    assert torch.allclose(features(model, images), want, atol=1e-5, rtol=1e-5)
    if client is not None:  # the classifier is privreid's (bias-free) one
        assert torch.equal(model.classifier.weight, reference.classifier.weight)
        assert not model.classifier.bias.any()


def test_torchreid_bnneck_model_is_the_trunk(ckpts, tmp_path, images):
    out = tmp_path / "bnneck.pth.tar"
    export(ckpts["bnneck"], "torchreid", out)
    payload = torch.load(out, weights_only=True)
    assert payload["torchreid"]["fc_dims"] is None and not any(k.startswith("fc.") for k in payload["state_dict"])
    resnet = torchreid_resnet()
    model = resnet.ResNet(num_classes=1, loss="softmax", block=resnet.BasicBlock, layers=[2, 2, 2, 2],
                          last_stride=1, fc_dims=None)
    model.load_state_dict({**payload["state_dict"], **{k: v for k, v in model.state_dict().items()
                                                       if k.startswith("classifier.")}}, strict=True)
    reference = load_model(ckpts["bnneck"])
    assert torch.allclose(features(model, images), features(reference.backbone, images), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("client", [None, CLIENT])
def test_onnx_runs_in_onnxruntime_with_privreid_features(ckpts, tmp_path, images, client):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    out = tmp_path / "model.onnx"
    text = export(ckpts["linear"], "onnx", out, *(["--client", client] if client else []))
    assert "torch.export" in text
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert meta["input_height"] == "32" and meta["input_width"] == "16" and meta["std"] == "0.229,0.224,0.225"
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = session.run(["features"], {"images": images.numpy()})[0]  # batch 5: the batch axis is dynamic
    want = features(load_model(ckpts["linear"], client=client), images)
    assert got.shape == tuple(want.shape)
    assert torch.allclose(torch.from_numpy(got), want, atol=1e-4 * float(want.abs().max()), rtol=0)


def test_onnx_part_branch_model_falls_back_to_the_tracer(tmp_path, images):
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = build_model("resnet18", feat_dim=16, transforms=["part_branch"]).eval()
    with torch.no_grad():
        model.part.fusion_weight.fill_(0.25)
    report = export_model(model, "onnx", tmp_path / "arks.onnx", height=32, width=16)
    assert report["exporter"] == "torchscript" and report["onnx_max_rel_diff"] <= 1e-4
    import onnxruntime as ort

    got = ort.InferenceSession(str(tmp_path / "arks.onnx")).run(None, {"images": images.numpy()})[0]
    assert torch.allclose(torch.from_numpy(got), features(model, images), atol=1e-4, rtol=1e-4)


def test_torchreid_refuses_layers_torchreid_lacks(tmp_path):
    for transform, what in (("group_norm", "GroupNorm"), ("part_branch", "part branch"),
                            ("attentive_norm", "attentive")):
        with pytest.raises(ConfigError, match=what):
            export_model(build_model("resnet18", feat_dim=16, transforms=[transform]), "torchreid", tmp_path / "x",
                         height=32, width=16)
    assert not list(tmp_path.iterdir())


def test_bad_input_is_one_line_and_writes_nothing(ckpts, tmp_path, monkeypatch):
    ckpt = ckpts["linear"]
    existing = tmp_path / "exists.pt"
    existing.write_bytes(b"keep")
    cases = [
        (["--format", "tflite", "--out", tmp_path / "a"], "--format must be one of"),
        (["--out", tmp_path], "is a directory"),
        (["--out", existing], "pass --overwrite"),
        (["--out", tmp_path / "missing" / "a.pt"], "does not exist"),
        (["--client", "nobody", "--out", tmp_path / "a"], "no client 'nobody'"),
    ]
    for args, message in cases:
        res = invoke("export", "--model", ckpt, *args)
        assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, res.output
    res = invoke("export", "--model", tmp_path / "none.pt", "--out", tmp_path / "a")
    assert res.exit_code == 2 and "checkpoint not found" in res.output
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if privreid[export] were not installed
    res = invoke("export", "--model", ckpt, "--format", "onnx", "--out", tmp_path / "a.onnx")
    assert res.exit_code == 2 and "pip install 'privreid[export]'" in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists.pt"] and existing.read_bytes() == b"keep"

