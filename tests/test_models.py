"""Tests for privreid.models: ResNet trunks, the ReID model and weight loading."""

from __future__ import annotations

import urllib.error

import pytest
import torch
import torchvision
from torch import nn

from privreid.errors import ConfigError
from privreid.models import (
    BasicBlock,
    Bottleneck,
    ReIDModel,
    ResNet,
    build_model,
    load_imagenet_weights,
    load_weights_file,
    replace_norm_layers,
)

TORCHVISION = {
    "resnet18": torchvision.models.resnet18,
    "resnet34": torchvision.models.resnet34,
    "resnet50": torchvision.models.resnet50,
}


def _trunk_state(tv_model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in tv_model.state_dict().items() if not k.startswith("fc.")}


def _randomise_norms(model: nn.Module) -> None:
    """Give every BatchNorm non-trivial affine parameters and running statistics."""
    gen = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.weight.data = 0.5 + torch.rand(n, generator=gen)
            m.bias.data = 0.1 * torch.randn(n, generator=gen)
            m.running_mean.copy_(0.1 * torch.randn(n, generator=gen))
            m.running_var.copy_(0.5 + torch.rand(n, generator=gen))


# --------------------------------------------------------------------- trunks


@pytest.mark.parametrize("arch", ["resnet18", "resnet34", "resnet50"])
def test_trunk_state_keys_match_torchvision_and_load_strictly(arch):
    tv = TORCHVISION[arch](weights=None)
    trunk = ResNet(arch)
    expected = _trunk_state(tv)
    assert list(trunk.state_dict()) == list(expected)
    trunk.load_state_dict(expected, strict=True)
    assert trunk.out_dim == (2048 if arch == "resnet50" else 512)
    trunk.eval()
    with torch.no_grad():
        assert trunk(torch.randn(1, 3, 32, 16)).shape == (1, trunk.out_dim)


def test_trunk_reproduces_torchvision_resnet18_features():
    torch.manual_seed(0)
    tv = torchvision.models.resnet18(weights=None)
    _randomise_norms(tv)
    tv.fc = nn.Identity()
    trunk = ResNet("resnet18", last_stride=2)
    trunk.load_state_dict(_trunk_state(tv), strict=True)
    tv.eval()
    trunk.eval()
    x = torch.randn(3, 3, 64, 32)
    with torch.no_grad():
        expected = tv(x)
        got = trunk(x)
    assert got.shape == (3, 512)
    assert expected.abs().max() > 0.1  # a non-degenerate comparison
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_last_stride_one_doubles_layer4_resolution():
    x = torch.randn(1, 3, 64, 32)
    s2, s1 = ResNet("resnet18", last_stride=2).eval(), ResNet("resnet18", last_stride=1).eval()
    with torch.no_grad():
        map2, map1 = s2.feature_map(x), s1.feature_map(x)
    assert map2.shape == (1, 512, 2, 1)
    assert map1.shape == (1, 512, 4, 2)
    with pytest.raises(ConfigError, match="last_stride"):
        ResNet("resnet18", last_stride=3)


def _hook_everything(model: nn.Module, block_types: tuple[type, ...]) -> list[str]:
    """Full backward hooks on every leaf module and every residual block (as Opacus does)."""
    calls: list[str] = []
    for name, m in model.named_modules():
        if not list(m.children()) or isinstance(m, block_types):
            m.register_full_backward_hook(lambda mod, gin, gout, name=name: calls.append(name))
    return calls


@pytest.mark.parametrize("arch", ["resnet18", "resnet50"])
def test_full_backward_hooks_work_on_our_trunk(arch):
    trunk = ResNet(arch)
    assert not [n for n, m in trunk.named_modules() if getattr(m, "inplace", False)]
    calls = _hook_everything(trunk, (BasicBlock, Bottleneck))
    trunk(torch.randn(2, 3, 32, 16, requires_grad=True)).sum().backward()
    assert "layer1.0" in calls and "layer4.1.bn2" in calls and "conv1" in calls
    assert all(p.grad is not None for p in trunk.parameters())


def test_full_backward_hooks_fail_on_torchvision_resnet18():
    """The same check fails on torchvision's in-place residual add, so the test above can fail."""
    tv = torchvision.models.resnet18(weights=None)
    tv.fc = nn.Identity()
    _hook_everything(tv, (torchvision.models.resnet.BasicBlock,))
    with pytest.raises(RuntimeError, match="inplace"):
        tv(torch.randn(2, 3, 32, 16, requires_grad=True)).sum().backward()


def test_replace_all_norms_with_groupnorm():
    trunk = ResNet("resnet18")
    trunk.double()
    replaced = replace_norm_layers(trunk, lambda c: nn.GroupNorm(8, c))
    # stem + 2 per block x 8 blocks + 3 downsample norms
    assert len(replaced) == 1 + 16 + 3
    assert "bn1" in replaced and "layer2.0.downsample.1" in replaced and "layer4.1.bn2" in replaced
    assert not [m for m in trunk.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(isinstance(trunk.get_submodule(n), nn.GroupNorm) for n in replaced)
    assert trunk.bn1.weight.dtype == torch.float64
    trunk.train()
    out = trunk(torch.randn(1, 3, 32, 16, dtype=torch.float64))  # batch 1 trains: no batch statistics
    assert out.shape == (1, 512)


def test_replace_only_bn2_of_each_block():
    trunk = ResNet("resnet50")
    replaced = replace_norm_layers(
        trunk, lambda c: nn.GroupNorm(1, c), predicate=lambda name, m: name.endswith(".bn2")
    )
    assert len(replaced) == 3 + 4 + 6 + 3
    assert all(n.endswith(".bn2") for n in replaced)
    for name, m in trunk.named_modules():
        if name.endswith(".bn2"):
            assert isinstance(m, nn.GroupNorm)
        elif name.endswith((".bn1", ".bn3", "downsample.1")) or name == "bn1":
            assert isinstance(m, nn.BatchNorm2d)
    with torch.no_grad():
        assert trunk.eval()(torch.randn(1, 3, 32, 16)).shape == (1, 2048)


def test_replace_norms_reaches_the_neck():
    model = build_model(num_classes=3, feat_dim=64)
    replaced = replace_norm_layers(model, lambda c: nn.GroupNorm(4, c))
    assert "neck.bn" in replaced and "backbone.layer1.0.bn2" in replaced
    _, feat, logits = model.forward_train(torch.randn(1, 3, 32, 16))
    assert feat.shape == (1, 64) and logits.shape == (1, 3)


# ----------------------------------------------------------------- ReID model


def test_linear_neck_default_shapes_and_state_keys():
    model = build_model(num_classes=7, feat_dim=128)
    assert model.neck_kind == "linear" and model.last_stride == 1 and model.feat_dim == 128
    keys = list(model.state_dict())
    for key in ("neck.fc.weight", "neck.fc.bias", "neck.bn.weight", "neck.bn.running_var", "classifier.weight"):
        assert key in keys
    assert "classifier.bias" not in keys
    assert torch.count_nonzero(model.neck.fc.bias) == 0
    x = torch.randn(4, 3, 32, 16)
    assert model(x).shape == (4, 128)
    pre, feat, logits = model.forward_train(x)
    assert pre.shape == (4, 512) and feat.shape == (4, 128) and logits.shape == (4, 7)
    model.eval()
    with torch.no_grad():
        _, feat_eval, _ = model.forward_train(x)
        torch.testing.assert_close(model(x), feat_eval)


def test_bnneck_shapes_and_frozen_bias():
    model = ReIDModel(num_classes=5, neck="bnneck", feat_dim=128)
    assert model.feat_dim == 512  # bnneck keeps the trunk width; feat_dim is for the linear neck
    assert not model.neck.bn.bias.requires_grad
    assert model.neck.bn.weight.requires_grad
    pre, feat, logits = model.forward_train(torch.randn(4, 3, 32, 16))
    assert pre.shape == feat.shape == (4, 512) and logits.shape == (4, 5)
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 3])).backward()
    assert model.neck.bn.bias.grad is None
    assert model.neck.bn.weight.grad is not None
    assert torch.count_nonzero(model.neck.bn.bias) == 0


def test_reset_classifier_and_eval_only_models():
    model = build_model(num_classes=0, feat_dim=64)
    assert model.classifier is None and model.num_classes == 0
    with torch.no_grad():
        assert model.eval()(torch.randn(2, 3, 32, 16)).shape == (2, 64)
    with pytest.raises(ConfigError, match="reset_classifier"):
        model.forward_train(torch.randn(2, 3, 32, 16))
    model.reset_classifier(1000)
    head = model.classifier
    assert isinstance(head, nn.Linear) and head.weight.shape == (1000, 64) and head.bias is None
    assert 0.0007 < head.weight.std().item() < 0.0013
    model.reset_classifier(3)
    assert model.classifier is not head and model.num_classes == 3
    model.reset_classifier(0)
    assert model.classifier is None
    with pytest.raises(ConfigError):
        model.reset_classifier(-1)


def test_model_config_rebuilds_the_same_architecture():
    model = build_model(arch="resnet34", num_classes=4, neck="bnneck", last_stride=2)
    config = model.model_config()
    assert config == {"arch": "resnet34", "num_classes": 4, "neck": "bnneck", "feat_dim": 512, "last_stride": 2,
                      "transforms": []}
    rebuilt = build_model(**config)
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {
        k: v.shape for k, v in model.state_dict().items()
    }


def test_build_model_rejects_unknown_choices():
    with pytest.raises(ConfigError, match="resnet18, resnet34, resnet50"):
        build_model(arch="vgg16")
    with pytest.raises(ConfigError, match="linear, bnneck"):
        build_model(neck="mlp")
    with pytest.raises(ConfigError, match="imagenet"):
        build_model(pretrained="coco")
    with pytest.raises(ConfigError, match="not both"):
        build_model(pretrained="imagenet", weights="w.pt")


# --------------------------------------------------------------------- weights


def test_trunk_style_weights_file_round_trip(tmp_path):
    tv = torchvision.models.resnet18(weights=None)
    _randomise_norms(tv)
    path = tmp_path / "resnet18_trunk.pth"
    torch.save(tv.state_dict(), path)  # includes fc.*, which is ignored
    model = build_model(num_classes=3)
    loaded = load_weights_file(model, path)
    assert loaded == [f"backbone.{k}" for k in _trunk_state(tv)]
    for key, value in _trunk_state(tv).items():
        assert torch.equal(model.backbone.state_dict()[key], value)


def test_full_model_weights_file_round_trip(tmp_path):
    source = build_model(num_classes=5, feat_dim=64)
    _randomise_norms(source)
    path = tmp_path / "model.pth"
    torch.save(source.state_dict(), path)

    same = build_model(num_classes=5, feat_dim=64, weights=path)
    for key, value in source.state_dict().items():
        assert torch.equal(same.state_dict()[key], value), key

    other_head = build_model(num_classes=9, feat_dim=64)
    loaded = load_weights_file(other_head, path)
    assert "classifier.weight" not in loaded and "neck.fc.weight" in loaded
    assert other_head.classifier.weight.shape == (9, 64)
    torch.testing.assert_close(other_head.neck.fc.weight, source.neck.fc.weight)

    eval_only = build_model(feat_dim=64, weights=path)
    assert eval_only.classifier is None
    torch.testing.assert_close(eval_only.backbone.conv1.weight, source.backbone.conv1.weight)


def test_wrapped_data_parallel_checkpoint_loads(tmp_path):
    source = build_model(feat_dim=32)
    path = tmp_path / "ckpt.pth.tar"
    torch.save({"epoch": 3, "state_dict": {f"module.{k}": v for k, v in source.state_dict().items()}}, path)
    model = build_model(feat_dim=32)
    assert len(load_weights_file(model, path)) == len(source.state_dict())
    torch.testing.assert_close(model.neck.fc.weight, source.neck.fc.weight)


def test_weights_file_errors_name_the_file(tmp_path):
    model = build_model(feat_dim=64)

    def expect(path, match):
        with pytest.raises(ConfigError, match=match) as info:
            load_weights_file(model, path)
        assert str(path) in str(info.value)

    expect(tmp_path / "absent.pth", "does not exist")
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"this is not a torch file")
    expect(garbage, "cannot read")
    not_state = tmp_path / "list.pth"
    torch.save([1, 2, 3], not_state)
    expect(not_state, "does not hold a state dict")
    foreign = tmp_path / "foreign.pth"
    torch.save({"encoder.weight": torch.zeros(3)}, foreign)
    expect(foreign, "no key matches")
    wider = tmp_path / "wider_neck.pth"
    torch.save(build_model(feat_dim=128).state_dict(), wider)
    expect(wider, r"shape mismatch for neck\.fc\.weight")
    deeper = tmp_path / "resnet34.pth"
    torch.save(torchvision.models.resnet34(weights=None).state_dict(), deeper)
    expect(deeper, r"does not have: backbone\.layer1\.2")
    partial = tmp_path / "partial.pth"
    state = _trunk_state(torchvision.models.resnet18(weights=None))
    del state["layer4.1.conv2.weight"]
    torch.save(state, partial)
    expect(partial, r"missing backbone\.layer4\.1\.conv2\.weight")


def test_imagenet_weights_offline_raise_config_error(monkeypatch):
    def offline(self, *args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.models.WeightsEnum, "get_state_dict", offline)
    with pytest.raises(ConfigError, match="--weights FILE") as info:
        build_model(pretrained="imagenet")
    assert "\n" not in str(info.value)
    assert "ResNet18_Weights.IMAGENET1K_V1" in str(info.value)


def test_imagenet_weights_load_strictly_when_available(monkeypatch):
    tv = torchvision.models.resnet18(weights=None)
    _randomise_norms(tv)
    requested = []

    def cached(self, *args, **kwargs):
        requested.append(self)
        return tv.state_dict()

    monkeypatch.setattr(torchvision.models.WeightsEnum, "get_state_dict", cached)
    model = build_model(pretrained="imagenet")
    assert requested == [torchvision.models.ResNet18_Weights.IMAGENET1K_V1]
    for key, value in _trunk_state(tv).items():
        assert torch.equal(model.backbone.state_dict()[key], value)

    group_norm_trunk = ResNet("resnet18", norm_layer=lambda c: nn.GroupNorm(8, c))
    with pytest.raises(ConfigError, match="replace_norm_layers"):
        load_imagenet_weights(group_norm_trunk)


def test_mlp_head_is_fedreid_mapping_network():
    model = build_model("resnet18", feat_dim=16, num_classes=7, transforms=["mlp_head"])
    kinds = [type(m).__name__ for m in model.classifier]
    assert kinds == ["Linear", "BatchNorm1d", "ReLU", "Dropout", "Linear"]  # Eq. 7 of paper 002
    assert model.num_classes == 7 and model.classifier[4].out_features == 7
    _, feat, logits = model.forward_train(torch.randn(3, 3, 32, 16))
    assert logits.shape == (3, 7) and feat.shape == (3, 16)
    model.reset_classifier(0)
    assert model.classifier is None and model.num_classes == 0
    with pytest.raises(ConfigError, match="unknown model transform 'tree'"):
        build_model("resnet18", transforms=["tree"])
