"""Model transforms (privreid.models.transforms): what each changes, the builder's order, old model configs."""

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from privreid.errors import ConfigError
from privreid.models import ReIDModel, build_from_config, build_model, transforms
from privreid.models.attentive_norm import AttentiveNorm2d
from privreid.models.part_branch import PartBranch
from privreid.models.transforms import AttentiveNormTransform, make_transform

BN = nn.modules.batchnorm._BatchNorm


def tiny(**kw) -> ReIDModel:
    torch.manual_seed(0)
    return build_model("resnet18", feat_dim=16, **kw)


def norm_types(model: nn.Module) -> dict[str, str]:
    return {n: type(m).__name__ for n, m in model.named_modules() if isinstance(m, (BN, nn.GroupNorm))}


def test_the_base_model_has_a_linear_head_no_part_branch_and_no_transforms():
    model = tiny(num_classes=4)
    assert isinstance(model.classifier, nn.Linear) and model.classifier.bias is None
    assert model.part is None and model.transforms == [] and not model.has_transform("mlp_head")
    assert model.model_config() == {"arch": "resnet18", "num_classes": 4, "neck": "linear", "feat_dim": 16,
                                    "last_stride": 1, "transforms": []}


def test_mlp_head_replaces_the_classifier_and_every_later_one():
    model = tiny(num_classes=4, transforms=["mlp_head"])
    assert [type(m).__name__ for m in model.classifier] == ["Linear", "BatchNorm1d", "ReLU", "Dropout", "Linear"]
    assert model.classifier[0].in_features == 16 and model.classifier[4].out_features == 4
    assert torch.equal(model.classifier[4].bias, torch.zeros(4))
    model.reset_classifier(9)  # a client's fresh head
    assert model.classifier[4].out_features == 9 and model.new_head(3)[4].out_features == 3
    # the rest of the model is the base model's, tensor for tensor (the head is built last)
    base = tiny(num_classes=4)
    assert {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.")}.keys() == \
        {k for k in base.state_dict() if not k.startswith("classifier.")}


def test_part_branch_adds_part_keys_and_fuses_the_feature():
    model = tiny(num_classes=3, transforms=["part_branch"]).eval()
    assert isinstance(model.part, PartBranch)
    extra = set(model.state_dict()) - set(tiny(num_classes=3).state_dict())
    assert extra == {"part.fc.weight", "part.fc.bias", "part.bn.weight", "part.bn.bias", "part.bn.running_mean",
                     "part.bn.running_var", "part.bn.num_batches_tracked", "part.fusion_weight"}
    assert model.part.fc.in_features == 3 * 512 and model.part.fc.out_features == 16
    x = torch.randn(2, 3, 32, 16)
    with torch.no_grad():
        fmap = model.backbone.feature_map(x)
        g = model.neck(torch.flatten(model.backbone.avgpool(fmap), 1))
        assert torch.allclose(model(x), 0.5 * g + 0.5 * model.part(fmap), atol=1e-6)  # FedARKS Eq. 1, v = 0.5


def test_group_norm_converts_every_batchnorm_and_later_heads():
    model = tiny(num_classes=3, transforms=["group_norm", "mlp_head", "part_branch"])
    plain = tiny(num_classes=3, transforms=["mlp_head", "part_branch"])
    assert set(norm_types(model)) == set(norm_types(plain))  # the same layers, the same names
    assert set(norm_types(model).values()) == {"GroupNorm"} and set(norm_types(plain).values()) == {
        "BatchNorm2d", "BatchNorm1d"}
    assert model.backbone.bn1.num_groups == 32 and model.neck.bn.num_groups == 1
    model.reset_classifier(5)
    assert isinstance(model.classifier[1], nn.GroupNorm) and model.classifier[1].num_groups == 1


def test_attentive_norm_replaces_each_blocks_second_norm_only():
    model = tiny(transforms=[AttentiveNormTransform(components=(1, 2, 3, 4), act="softmax")])
    an = {n: m.num_components for n, m in model.named_modules() if isinstance(m, AttentiveNorm2d)}
    assert an == {f"backbone.layer{s}.{b}.bn2": s for s in range(1, 5) for b in range(2)}
    assert type(model.backbone.layer1[0].bn1) is nn.BatchNorm2d and model.backbone.layer1[0].bn2.act == "softmax"
    assert model.model_config()["transforms"] == [{"name": "attentive_norm", "components": [1, 2, 3, 4],
                                                   "act": "softmax"}]
    assert make_transform({"name": "attentive_norm", "components": 5}).components == (5, 5, 5, 5)
    with pytest.raises(ConfigError, match="an_components"):
        AttentiveNormTransform(components=(1, 2))
    with pytest.raises(ConfigError, match="unknown AN activation"):
        AttentiveNormTransform(act="relu")


def test_dual_norm_copies_the_final_trunk_and_neck_norms():
    model = tiny(num_classes=3, transforms=["dual_norm", AttentiveNormTransform(components=2)])
    copies = dict(model.general_norms.items())
    originals = {n: m for n, m in model.named_modules()
                 if n.startswith(("backbone.", "neck.")) and isinstance(m, (BN, nn.GroupNorm))}
    assert set(copies) == {n.replace(".", "__") for n in originals}  # the classifier's norms are not copied
    assert isinstance(copies["backbone__layer1__0__bn2"], AttentiveNorm2d)  # applied after AN: copies AN
    for name, module in originals.items():
        copy = copies[name.replace(".", "__")]
        assert copy is not module
        assert all(torch.equal(a, b) for a, b in zip(copy.state_dict().values(), module.state_dict().values()))


def test_the_builder_orders_transforms_and_refuses_repeats_and_clashes():
    a = tiny(transforms=["dual_norm", "part_branch", "mlp_head"])
    b = tiny(transforms=["mlp_head", "part_branch", "dual_norm"])
    assert [t.name for t in a.transforms] == ["mlp_head", "part_branch", "dual_norm"]
    assert a.model_config() == b.model_config()
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    with pytest.raises(ConfigError, match="more than once"):
        tiny(transforms=["part_branch", {"name": "part_branch"}])
    with pytest.raises(ConfigError, match="attentive normalisation"):
        tiny(transforms=["attentive_norm", "group_norm"])
    with pytest.raises(ConfigError, match="has no parameter size"):
        tiny(transforms=[{"name": "part_branch", "size": 3}])


def test_the_initial_weights_come_before_the_norm_transforms(tmp_path):
    source = tiny()
    with torch.no_grad():
        source.backbone.layer2[0].bn2.weight.fill_(3.0)
        source.backbone.conv1.weight.fill_(0.5)
    torch.save(source.state_dict(), tmp_path / "w.pt")
    gn = tiny(weights=tmp_path / "w.pt", transforms=["group_norm"])
    assert torch.equal(gn.backbone.conv1.weight, source.backbone.conv1.weight)  # loaded, then converted
    assert torch.equal(gn.backbone.layer2[0].bn2.weight, torch.ones(128))  # GroupNorm starts fresh
    dual = tiny(weights=tmp_path / "w.pt", transforms=["dual_norm"])
    assert torch.equal(dual.general_norms["backbone__layer2__0__bn2"].weight, torch.full((128,), 3.0))


OLD_CONFIGS = [  # model_config dicts as checkpoints written before model transforms hold them
    ({"head": "linear"}, []),
    ({"head": "mlp"}, ["mlp_head"]),
    ({"head": "linear", "part_branch": True}, ["part_branch"]),
    ({"head": "linear", "norm": "group", "dropout": 0.5}, ["group_norm"]),
    ({"head": "linear", "attentive_norm": True, "an_components": [2, 2, 3, 3], "an_act": "sigmoid", "dual_norm": True},
     [{"name": "attentive_norm", "components": [2, 2, 3, 3], "act": "sigmoid"}, "dual_norm"]),
    ({"head": "linear", "dual_norm": True, "norm": "group"}, ["group_norm", "dual_norm"]),
    ({}, []),  # before the head key existed
]


@pytest.mark.parametrize("flags,expected", OLD_CONFIGS)
def test_old_flag_model_configs_rebuild_the_same_model(flags, expected):
    base = {"arch": "resnet18", "num_classes": 3, "neck": "linear", "feat_dim": 16, "last_stride": 1}
    torch.manual_seed(0)
    old = build_from_config({**base, **flags})
    new = tiny(num_classes=3, dropout=flags.get("dropout", 0.0), transforms=expected)
    assert list(old.state_dict()) == list(new.state_dict())
    assert all(torch.equal(old.state_dict()[k], new.state_dict()[k]) for k in new.state_dict())
    assert old.model_config() == new.model_config()
    assert "head" not in old.model_config() and build_from_config(old.model_config()).model_config() == \
        old.model_config()


def test_build_from_config_refuses_unknown_keys_and_values():
    with pytest.raises(ConfigError, match="unknown model_config key colour"):
        build_from_config({"arch": "resnet18", "colour": "red"})
    with pytest.raises(ConfigError, match="unknown head 'tree'"):
        build_from_config({"arch": "resnet18", "head": "tree"})
    with pytest.raises(ConfigError, match="unknown norm 'layer'"):
        build_from_config({"arch": "resnet18", "norm": "layer"})
    with pytest.raises(ConfigError, match="unknown model transform 'ibn'"):
        build_from_config({"arch": "resnet18", "transforms": [{"name": "ibn"}]})


def test_methods_and_dp_sgd_declare_their_transforms(tmp_path):
    from conftest import tiny_config

    from privreid.composition import build_method

    def names(method, **kw):
        cfg = tiny_config(tmp_path, method=method, **kw)
        return [t["name"] for t in build_method(cfg).model_config(cfg)["transforms"]]

    assert names("fedpav") == [] and names("fedreid") == ["mlp_head"] and names("fedarks") == ["part_branch"]
    assert names("ska") == ["mlp_head", "attentive_norm", "dual_norm"]
    assert names("ska", method_options={"an": "false"}) == ["mlp_head", "dual_norm"]
    assert names("ska", method_options={"an": "false", "lsn": "false", "head": "linear"}) == []
    assert names("fedpav", dp_sgd=True, noise_multiplier=1.0) == ["group_norm"]


DOC = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()


@pytest.fixture()
def model_transforms():
    with transforms.TRANSFORMS.restoring() as registry:  # the registry comes back after the test
        yield registry


def test_the_model_transform_example(model_transforms):
    section = DOC.split("## A model transform\n", 1)[1].split("\n## ", 1)[0]
    exec(re.search(r"```python\n(.*?)```", section, re.S).group(1), {})
    model = tiny(num_classes=3, transforms=["stem_instance_norm"])
    assert isinstance(model.backbone.bn1, nn.InstanceNorm2d) and model.backbone.bn1.affine
    assert type(model.backbone.layer1[0].bn1) is nn.BatchNorm2d
    assert model.model_config()["transforms"] == [{"name": "stem_instance_norm"}]
    again = build_from_config(model.model_config())
    again.load_state_dict(model.state_dict())
