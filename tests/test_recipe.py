"""Recipe options of issue 11: label smoothing reaches every identity loss, dropout before the classifier,
the neck's learning-rate group, the method's default triplet weight (FedARKS Eq. 2), deviations."""

import dataclasses

import pytest
import torch

from privreid.config import RunConfig
from privreid.data import PKSampler
from privreid.data.catalog import federation_for_config
from privreid.deviations import PAPER_RECIPES, RULES, deviations, recipe_deviations
from privreid.errors import ConfigError
from privreid.federated.client import ClientContext, SupervisedUpdate, client_loader
from privreid.federated.engine import FederatedEngine
from privreid.federated.registry import get_method
from privreid.models import build_model
from privreid.seeding import seed_everything
from privreid.composition import build_method, method_of

from conftest import tiny_config, with_fields
from privreid.composition import build_run

CPU = torch.device("cpu")


# --------------------------------------------------------------------------- label smoothing
@pytest.mark.parametrize("method", ["dppt", "fedarks", "fedpav"])
def test_label_smoothing_reaches_the_identity_loss(tiny_synth, tmp_path, monkeypatch, method):
    """Every cross-entropy the client update computes uses --label-smoothing, and its value is Szegedy's."""
    calls = []
    original = torch.nn.CrossEntropyLoss.forward

    def spy(self, logits, labels):
        loss = original(self, logits, labels)
        logp = torch.log_softmax(logits.detach(), dim=1)
        s = self.label_smoothing
        expected = -((1 - s) * logp.gather(1, labels[:, None]).squeeze(1) + s * logp.mean(1)).mean()
        calls.append((s, float(loss.detach()), float(expected)))
        return loss

    monkeypatch.setattr(torch.nn.CrossEntropyLoss, "forward", spy)
    for smoothing in (0.0, 0.3):
        cfg = tiny_config(tiny_synth, method=method, rounds=1, label_smoothing=smoothing, max_steps_per_epoch=1)
        engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path / f"ls{smoothing}", progress=False, build=build_run)
        calls.clear()
        engine.train_client(engine.clients[0], 0)
        assert calls and all(s == smoothing for s, _, _ in calls)
        assert all(loss == pytest.approx(expected, rel=1e-5) for _, loss, expected in calls)


# --------------------------------------------------------------------------- dropout
def test_dropout_acts_before_the_classifier_in_training_only():
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=5, feat_dim=16, dropout=0.5)
    plain = build_model("resnet18", num_classes=5, feat_dim=16)
    plain.load_state_dict(model.state_dict())  # dropout has no state: the same keys
    assert model.model_config()["dropout"] == 0.5 and "dropout" not in plain.model_config()
    assert build_model(**model.model_config()).dropout.p == 0.5
    x = torch.randn(4, 3, 32, 16)
    feat = torch.randn(64, 16)
    model.train()
    dropped = model.classify(feat)
    assert not torch.allclose(dropped, model.classifier(feat))
    kept = torch.nn.functional.dropout  # the expected form: zero half the features, scale the rest by 2
    torch.manual_seed(1)
    a = model.classify(feat)
    torch.manual_seed(1)
    assert torch.allclose(a, model.classifier(kept(feat, 0.5, training=True)))
    with torch.no_grad():
        assert torch.allclose(model(x), plain(x))  # the retrieval feature never drops
        model.eval(), plain.eval()
        assert torch.equal(model.classify(feat), model.classifier(feat))  # eval: no dropout
        assert torch.equal(model.forward_train(x)[2], plain.forward_train(x)[2])
    with pytest.raises(ConfigError, match="dropout"):
        build_model("resnet18", dropout=1.0)
    with pytest.raises(ConfigError, match="dropout must lie"):
        RunConfig(model=dataclasses.replace(RunConfig().model, dropout=-0.1)).validate()


# --------------------------------------------------------------------------- learning-rate groups
def groups(optimizer):
    return [({id(p) for p in g["params"]}, g["lr"]) for g in optimizer.param_groups]


def test_neck_group_only_when_lr_neck_is_given(tiny_synth):
    model = build_model("resnet18", num_classes=4, feat_dim=16)
    neck = {id(p) for p in model.neck.parameters()}
    head = {id(p) for p in model.classifier.parameters()}
    everything = {id(p) for p in model.parameters()}
    cfg = tiny_config(tiny_synth, lr_backbone=0.005, lr_head=0.05)
    (body, lr_body), (h, lr_h) = groups(SupervisedUpdate(cfg).optimizer(model, 0))
    assert h == head and body == everything - head and neck <= body  # as before: the neck trains with the body
    assert (lr_body, lr_h) == (0.005, 0.05)
    cfg = with_fields(cfg, lr_neck=0.05, lr_step=40, lr_gamma=0.1)
    (body, lr_body), (h, lr_h), (n, lr_n) = groups(SupervisedUpdate(cfg).optimizer(model, 40))
    assert n == neck and h == head and body == everything - head - neck
    assert (lr_body, lr_h, lr_n) == pytest.approx((0.0005, 0.005, 0.005))  # decayed once at round 40
    # FedARKS: its part branch keeps the head's rate, the neck its own
    arks = build_model("resnet18", num_classes=4, feat_dim=16, transforms=["part_branch"])
    cfg = tiny_config(tiny_synth, method="fedarks", lr_backbone=0.005, lr_head=0.05, lr_neck=0.02)
    opt = get_method("fedarks").make_client_update(cfg).optimizer(arks, 0)
    rates = {frozenset(ids): lr for ids, lr in groups(opt)}
    assert rates[frozenset(id(p) for p in arks.neck.parameters())] == 0.02
    assert rates[frozenset(id(p) for p in arks.part.parameters())] == 0.05


# --------------------------------------------------------------------------- triplet weight
def test_triplet_weight_defaults_to_the_methods(tiny_synth):
    fedarks = tiny_config(tiny_synth, method="fedarks")
    arks = get_method("fedarks")
    assert fedarks.optim.triplet_weight is None and arks.triplet_weight_for(fedarks) == 1.0  # Eq. 2
    assert get_method("fedpav").triplet_weight_for(tiny_config(tiny_synth, method="fedpav")) == 0.0
    assert arks.triplet_weight_for(with_fields(fedarks, triplet_weight=0.0)) == 0.0  # a user can still switch it off
    client = federation_for_config(fedarks).clients[0]
    assert isinstance(client_loader(client, fedarks, 0, triplet_weight=1.0).sampler, PKSampler)  # PK for the triplet
    assert not isinstance(client_loader(client, fedarks, 0).sampler, PKSampler)
    with pytest.raises(ConfigError, match="triplet"):  # DP-SGD cannot bound the (default) triplet term
        build_method(with_fields(fedarks, dp_sgd=True, noise_multiplier=1.0).validate())
    build_method(with_fields(fedarks, dp_sgd=True, noise_multiplier=1.0, triplet_weight=0.0).validate())


def test_fedarks_trains_with_the_triplet_by_default(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, method="fedarks", rounds=1, max_steps_per_epoch=1)
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, build=build_run)
    seed_everything(0)
    upload = engine.train_client(engine.clients[0], 0)
    assert upload.metrics["triplet_on"] == 1.0


# --------------------------------------------------------------------------- deviations
def test_deviation_rules_and_recipe_values(tiny_synth):
    base = tiny_config(tiny_synth, method="fedavg")  # a baseline: no paper recipe, the general rules only
    assert deviations(base, method_of(base)) == [
        "identity loss with label smoothing 0.1 (the five papers and their code use plain cross-entropy: "
        "--label-smoothing 0)",
        "local epochs capped at 2 batches (--max-steps; the papers train whole epochs)"]
    assert deviations(with_fields(base, label_smoothing=0.0, max_steps_per_epoch=None), method_of(with_fields(base, label_smoothing=0.0, max_steps_per_epoch=None))) == []
    fedarks = with_fields(tiny_config(tiny_synth, method="fedarks"), triplet_weight=0.0)
    assert "--triplet-weight 0 (FedARKS: 1; paper 001 Eq. 2)" in recipe_deviations(fedarks, method_of(fedarks))
    assert "--rounds 2 (FedARKS: 40; paper 001 Fig. 4)" in recipe_deviations(fedarks, method_of(fedarks))
    assert any("PifPaf" in d for d in deviations(fedarks, method_of(fedarks)))
    dppt = tiny_config(tiny_synth, method="dppt", method_options={"shared_classifier": False, "instances": 4})
    assert any("local classifier per client" in d for d in deviations(dppt, method_of(dppt)))
    assert "--opt instances=4 (L2RW+ DPPT: 8; paper 003 Sec. IV-B: 8 identities x 8 images)" in deviations(dppt, method_of(dppt))
    assert "--rounds 2 (L2RW+ DPPT: 30; paper 003 Sec. IV-B: CI 50, EI 30, video 100)" in deviations(dppt, method_of(dppt))  # EI
    dppt.data.protocol = "ci"
    assert "--rounds 2 (L2RW+ DPPT: 50 or 100; paper 003 Sec. IV-B: CI 50, EI 30, video 100)" in deviations(dppt, method_of(dppt))
    shared = tiny_config(tiny_synth, method="dppt")
    assert not any("local classifier" in d for d in deviations(shared, method_of(shared)))
    # effective values: an unset --lr-neck is the backbone's rate
    fedpav = tiny_config(tiny_synth, method="fedpav", lr_backbone=0.05)
    assert not any(d.startswith("--lr-neck") for d in recipe_deviations(fedpav, method_of(fedpav)))
    assert "--lr-neck 0.005 (FedPav: 0.05; reference code cap-ntu/FedReID: the 512-d bottleneck trains with the " \
           "classifier)" in recipe_deviations(with_fields(fedpav, lr_backbone=0.005), method_of(with_fields(fedpav, lr_backbone=0.005)))
    # every method a recipe names exists, every rule has a unique name
    assert all(get_method(name) for name in PAPER_RECIPES)
    assert len({r.name for r in RULES}) == len(RULES)


def test_secure_aggregation_states_its_deviations_and_distributed_dp_adds_its_accounting():
    plain = RunConfig()
    secure = plain.with_values({"privacy.secure_aggregation": True})
    with_dp = secure.with_values({"privacy.client_dp": True})
    assert not any("secure aggregation" in d for d in deviations(plain, method_of(plain)))
    [text] = [d for d in deviations(secure, method_of(secure)) if d.startswith("secure aggregation")]
    assert "not parameters" in text and "Flower: 1000" in text and "continuous Gaussian" not in text
    [text_dp] = [d for d in deviations(with_dp, method_of(with_dp)) if d.startswith("secure aggregation")]
    assert "continuous Gaussian" in text_dp


def test_dppt_preset_follows_the_reference_code_and_names_the_prose():
    # issue 25: Joey623/L2RW keeps one SGD optimiser per client, trains the BNNeck bias and uses top_k 5 under CI
    # (the paper says K = 4); the preset follows the code and names the prose it departs from
    from pathlib import Path

    from privreid.commands.sweep import base_config
    from privreid.deviations import prose_departures

    path = Path(__file__).resolve().parents[1] / "configs" / "dppt-sysu-paper.yaml"
    config = base_config(["--config", str(path)])
    assert recipe_deviations(config, method_of(config)) == []
    [topk] = prose_departures(config, method_of(config))
    assert topk.startswith("--opt topk=5 follows the reference code Joey623/L2RW") and "TOP K = 4" in topk
    fresh = base_config(["--config", str(path), "--opt", "persistent_optimizer=false", "--opt", "topk=4"])
    devs = recipe_deviations(fresh, method_of(fresh))
    assert any(d.startswith("--opt persistent_optimizer=off (L2RW+ DPPT: on; reference code") for d in devs)
    assert any(d.startswith("--opt topk=4 (L2RW+ DPPT: 5;") and "the paper's prose" in d for d in devs)
    assert any("mixed precision" in d for d in deviations(config, method_of(config)))
