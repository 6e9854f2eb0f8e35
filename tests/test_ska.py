"""SKA (paper 000): attentive normalisation, local-specific norms, dual local-generalised model."""

import pytest
import torch
from torch import nn

from privreid.checkpoint import load_checkpoint, load_model
from privreid.data.catalog import build_federation
from privreid.federated.engine import FederatedEngine
from privreid.federated.methods import ska
from privreid.federated.strategy import UniformAverage, Upload
from privreid.models import NORM_TYPES, build_model
from privreid.models.transforms import AttentiveNormTransform
from privreid.models.attentive_norm import AttentiveNorm2d, apply_attentive_norm

from conftest import spy_on_uploads, tiny_config
from privreid.composition import build_run


def federation(cfg):
    return build_federation(cfg.data.roots, test_domains=cfg.data.test_domains)


def ska_config(root, rounds=1, **opts):
    return tiny_config(root, method="ska", rounds=rounds, method_options=opts)


# --------------------------------------------------------------------------- AN (Eq. 2)
def test_attentive_norm_matches_hand_computation():
    torch.manual_seed(0)
    an = AttentiveNorm2d(3, num_components=2, act="sigmoid").eval()
    with torch.no_grad():
        an.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
        an.running_var.copy_(torch.tensor([4.0, 1.0, 0.25]))
        an.mix_weight.copy_(torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]]))
        an.mix_bias.copy_(torch.tensor([[0.1, 0.2, 0.3], [1.0, -1.0, 0.0]]))
        an.attention.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0]]))
        an.attention.bias.copy_(torch.tensor([0.0, 0.5]))
    x = torch.randn(2, 3, 2, 2)
    y = an(x)
    for b in range(2):
        gap = x[b].mean(dim=(1, 2)) / torch.sqrt(x[b].flatten(1).var(1) + 1e-3)  # per-channel std (reference)
        lam = torch.sigmoid(torch.stack([gap[0], -gap[2] + 0.5]))
        for c in range(3):
            xhat = (x[b, c] - an.running_mean[c]) / torch.sqrt(an.running_var[c] + an.eps)
            expected = sum(lam[i] * (an.mix_weight[i, c] * xhat + an.mix_bias[i, c]) for i in range(2))
            assert torch.allclose(y[b, c], expected, atol=1e-5)


def test_attention_weights_softmax_sums_to_one_and_gates_in_unit_interval():
    torch.manual_seed(1)
    x = torch.randn(5, 8, 3, 3)
    soft = AttentiveNorm2d(8, num_components=4, act="softmax")
    nn.init.normal_(soft.attention.weight)
    lam = soft.attention_weights(x)
    assert lam.shape == (5, 4)
    assert torch.allclose(lam.sum(1), torch.ones(5), atol=1e-6)
    assert not torch.allclose(lam[0], lam[1])  # instance-specific
    gate = AttentiveNorm2d(8, num_components=4)  # hsigmoid default
    nn.init.normal_(gate.attention.weight, std=3.0)
    lam = gate.attention_weights(x)
    assert (lam >= 0).all() and (lam <= 1).all()


def test_attentive_norm_training_mode_uses_batch_statistics_and_starts_like_bn():
    torch.manual_seed(2)
    bn = nn.BatchNorm2d(6)
    an = AttentiveNorm2d.from_batchnorm(bn, num_components=3)
    x = torch.randn(4, 6, 5, 5) * 3 + 1
    y = an.train()(x)
    # attention FC starts at zero: lambda = act(0) for all, sum_i lambda_i gamma_i ~ 1 (noise 0.1/sqrt(M))
    gamma = (an.attention_weights(x) @ an.mix_weight)[0]
    assert (gamma - 1).abs().max() < 0.5
    assert torch.allclose(an.running_mean, 0.9 * torch.zeros(6) + 0.1 * x.mean((0, 2, 3)), atol=1e-5)
    assert y.shape == x.shape and isinstance(an, nn.BatchNorm2d) and isinstance(an, NORM_TYPES)


def test_an_replaces_the_second_norm_of_every_block_only():
    for arch, blocks in (("resnet18", 8), ("resnet50", 16)):
        model = build_model(arch, feat_dim=16, transforms=[AttentiveNormTransform(components=(1, 2, 3, 4))])
        ans = {n: m for n, m in model.named_modules() if isinstance(m, AttentiveNorm2d)}
        assert len(ans) == blocks and all(n.endswith(".bn2") for n in ans)
        assert ans["backbone.layer4.0.bn2"].num_components == 4
        assert ans["backbone.layer1.0.bn2"].num_components == 1
        assert type(model.backbone.layer1[0].bn1) is nn.BatchNorm2d
    trunk = build_model("resnet18", feat_dim=16).backbone
    assert apply_attentive_norm(trunk, 2)[0] == "layer1.0.bn2"


def test_model_config_rebuilds_an_and_dual_models_and_plain_configs_have_no_transforms():
    plain = build_model("resnet18", feat_dim=16)
    assert plain.model_config()["transforms"] == []
    model = build_model("resnet18", feat_dim=16, transforms=[AttentiveNormTransform(components=2), "dual_norm"])
    assert model.model_config()["transforms"] == [
        {"name": "attentive_norm", "components": [2, 2, 2, 2], "act": "hsigmoid"}, {"name": "dual_norm"}]
    again = build_model(**model.model_config())
    assert again.state_dict().keys() == model.state_dict().keys()
    # general_norms copies every trunk/neck norm layer, AN included
    norm_names = [n for n, m in model.named_modules()
                  if n.startswith(("backbone.", "neck.")) and isinstance(m, NORM_TYPES)]
    assert sorted(model.general_norms.keys()) == sorted(n.replace(".", "__") for n in norm_names)


# --------------------------------------------------------------------------- Algorithm 1, pure
def test_select_agg_and_select_update_by_hand():
    def is_norm(k):
        return k.startswith("bn")

    ls = {"conv.w": torch.tensor([1.0]), "bn.w": torch.tensor([2.0])}
    lg = {"conv.w": torch.tensor([10.0]), "bn.w": torch.tensor([20.0])}
    agg = ska.select_agg(ls, lg, is_norm)
    assert agg == {"conv.w": ls["conv.w"], "bn.w": lg["bn.w"]}
    # two clients, uniform mean (Alg. 1 line 6)
    ls2 = {"conv.w": torch.tensor([3.0]), "bn.w": torch.tensor([4.0])}
    lg2 = {"conv.w": torch.tensor([30.0]), "bn.w": torch.tensor([40.0])}
    ups = [Upload("a", agg, 1), Upload("b", ska.select_agg(ls2, lg2, is_norm), 99)]
    glob = UniformAverage().aggregate({}, ups).global_state
    assert torch.equal(glob["conv.w"], torch.tensor([2.0])) and torch.equal(glob["bn.w"], torch.tensor([30.0]))
    new_ls, new_lg = ska.select_update(glob, ls, is_norm)
    assert new_lg == glob
    assert torch.equal(new_ls["conv.w"], torch.tensor([2.0])) and torch.equal(new_ls["bn.w"], torch.tensor([2.0]))


def test_key_rules_on_a_real_model():
    model = build_model("resnet18", num_classes=3, feat_dim=16, transforms=[AttentiveNormTransform(components=2), "dual_norm"])
    state = model.state_dict()
    policy = ska.policy_for(ska.SKAOptions())
    local, shared = set(policy.local(state)), set(policy.shared(state))
    assert "backbone.layer1.0.bn2.attention.weight" in local and "backbone.layer1.0.bn2.mix_weight" in local
    assert "neck.bn.running_mean" in local and "classifier.weight" in local
    assert "backbone.conv1.weight" in shared and "neck.fc.weight" in shared
    general = {k for k in state if k.startswith(ska.GENERAL_PREFIX)}
    assert general <= shared
    norm_modules = [n.replace("__", ".") for n in model.general_norms.keys()]
    norm_keys = {k for k in local if not k.startswith("classifier.")}
    assert {ska.general_key(k, norm_modules) for k in norm_keys} == general
    assert all(ska.forward_key(ska.general_key(k, norm_modules)) == k for k in norm_keys)
    assert ska.policy_for(ska.SKAOptions(lsn=False)).local(state).keys() == {"classifier.weight"}


# --------------------------------------------------------------------------- engine
@pytest.fixture(scope="module")
def ska_run(tiny_synth, tmp_path_factory):
    """Two SKA rounds on tiny_synth with a spy on the server; returns (engine, uploads, out_dir)."""
    out = tmp_path_factory.mktemp("ska")
    cfg = ska_config(tiny_synth, rounds=2)
    mp = pytest.MonkeyPatch()
    seen = spy_on_uploads(mp, UniformAverage)
    try:
        engine = FederatedEngine(cfg, federation(cfg), out, progress=False, build=build_run)
        summary = engine.run()
    finally:
        mp.undo()
    return engine, seen, out, summary


def test_local_norms_never_uploaded_and_upload_is_select_agg(ska_run):
    engine, seen, out, summary = ska_run
    assert len(seen) == 2 and all(len(u) == 2 for u in seen)
    state = engine.model.state_dict()
    norm_keys = {k for k in state if ska.is_local_norm_key(k)}
    assert any(".bn2.attention." in k for k in norm_keys)  # AN is on
    for uploads in seen:
        for u in uploads:
            assert not set(u.state) & norm_keys
            assert not any(k.startswith("classifier.") for k in u.state)
            assert any(k.startswith(ska.GENERAL_PREFIX) for k in u.state)  # LG's norms go up
    # the uploaded norms are LG's, not LS's: they differ from the client's kept local norms
    ckpt = load_checkpoint(out / "ckpt.pt")
    modules = [n.replace("__", ".") for n in engine.model.general_norms.keys()]
    last = {u.client: u for u in seen[-1]}
    key = "backbone.layer1.0.bn2.mix_weight"
    for name, up in last.items():
        ls_val = ckpt["client_states"][name][key]
        lg_val = up.state[ska.general_key(key, modules)]
        assert not torch.allclose(ls_val, lg_val)
    assert summary["global_unseen"]["rank1"] >= 0


def test_dual_trains_lg_and_keeps_its_head_in_memory(ska_run):
    engine, seen, out, _ = ska_run
    ckpt = load_checkpoint(out / "ckpt.pt")
    init = engine.init_state
    key = ska.GENERAL_PREFIX + "backbone__layer1__0__bn2.mix_weight"
    # generalised norms moved away from their initial value (LG was trained)
    assert not torch.allclose(ckpt["global_state"][key], init[key])
    for name, mem in ckpt["client_memory"].items():
        assert any(k.startswith(ska.LG_HEAD_MEMORY) for k in mem)
    # global model: aggregated generalised norms on the forward norm keys
    extra = ckpt["global_eval_extra"]
    assert torch.equal(extra["backbone.layer1.0.bn2.mix_weight"], ckpt["global_state"][key])


def test_checkpoint_loads_global_and_personalised_models(ska_run):
    engine, seen, out, _ = ska_run
    ckpt = load_checkpoint(out / "ckpt.pt")
    glob = load_model(ckpt)
    pers = load_model(ckpt, client="synthA")
    k = "backbone.layer2.1.bn2.mix_bias"
    gk = ska.GENERAL_PREFIX + "backbone__layer2__1__bn2.mix_bias"
    assert torch.equal(glob.state_dict()[k], ckpt["global_state"][gk])
    assert torch.equal(pers.state_dict()[k], ckpt["client_states"]["synthA"][k])
    assert torch.equal(pers.state_dict()["backbone.conv1.weight"], ckpt["global_state"]["backbone.conv1.weight"])
    x = torch.randn(2, 3, 32, 16)
    assert glob(x).shape == pers(x).shape == (2, 32)
    assert not torch.allclose(glob(x), pers(x))


@pytest.mark.parametrize("opts,has_an,has_dual", [({"an": False}, False, True), ({"dual": False}, True, False),
                                                  ({"lsn": False}, True, False)])
def test_ablations_run_one_round(tiny_synth, tmp_path, opts, has_an, has_dual):
    cfg = ska_config(tiny_synth, rounds=1, **opts)
    engine = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run)
    engine.run()
    model = engine.model
    assert any(isinstance(m, AttentiveNorm2d) for m in model.modules()) == has_an
    assert hasattr(model, "general_norms") == has_dual
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    norm_in_global = any(ska.is_local_norm_key(k) for k in ckpt["global_state"])
    assert norm_in_global == (opts.get("lsn", True) is False)
    load_model(ckpt)
    load_model(ckpt, client="synthB")


def test_client_update_trains_ls_and_lg_separately(tiny_synth, monkeypatch):
    from privreid.federated.client import ClientContext
    from privreid.federated.policy import clone_state
    from privreid.seeding import seed_everything

    cfg = ska_config(tiny_synth)
    client = federation(cfg).clients[0]
    seed_everything(0)
    model = build_model("resnet18", num_classes=client.num_classes, feat_dim=16,
                        transforms=[AttentiveNormTransform(components=2), "dual_norm"])
    update = ska.SKA.make_client_update(cfg)
    glob = clone_state(update_policy_shared(model))
    before = clone_state(model.state_dict())
    captured = {}
    original = ska.SKAUpdate.extra_loss

    def spy(self, ctx, *args):
        captured["copies"] = self.lg_copies
        return original(self, ctx, *args)

    monkeypatch.setattr(ska.SKAUpdate, "extra_loss", spy)
    ctx = ClientContext(model=model, client=client, round=0, config=cfg, device=torch.device("cpu"),
                        global_state=glob, seed=1, memory={})
    update(ctx)
    after = model.state_dict()
    # LG's non-norm copies got gradients (and are not the resident parameters)
    assert captured["copies"] and all(c.grad is not None for c in captured["copies"])
    resident = {id(p) for p in model.parameters()}
    assert not any(id(c) in resident for c in captured["copies"])
    # LS norms, LG norms (parameters and running statistics) and LS convs all trained
    for key in ("backbone.layer1.0.bn2.mix_weight", "general_norms.backbone__layer1__0__bn2.mix_weight",
                "general_norms.backbone__bn1.running_mean", "backbone.bn1.running_mean", "backbone.conv1.weight"):
        assert not torch.allclose(after[key], before[key]), key
    assert any(k.startswith(ska.LG_HEAD_MEMORY) for k in ctx.memory)


def update_policy_shared(model):
    return ska.policy_for(ska.SKAOptions()).shared(model.state_dict())


def test_weights_file_seeds_the_an_layers(tmp_path):
    torch.manual_seed(3)
    plain = build_model("resnet18", feat_dim=16)
    with torch.no_grad():
        plain.backbone.layer3[1].bn2.running_mean.uniform_()
        plain.backbone.layer3[1].bn2.weight.fill_(2.0)
    torch.save(plain.state_dict(), tmp_path / "w.pt")
    model = build_model("resnet18", feat_dim=16, weights=tmp_path / "w.pt",
                        transforms=[AttentiveNormTransform(components=4)])
    an = model.backbone.layer3[1].bn2
    assert isinstance(an, AttentiveNorm2d)
    assert torch.equal(an.running_mean, plain.backbone.layer3[1].bn2.running_mean)
    # initial mixture sums to about the loaded gamma (2.0): lambda = act(0) for every component
    gamma = an.attention_weights(torch.zeros(1, an.num_features, 2, 2)) @ an.mix_weight
    assert (gamma - 2.0).abs().max() < 0.5


# --------------------------------------------------------------------------- personalised model, Table 4, label smoothing
def test_personalised_model_is_the_ls_model_after_select_update(ska_run):
    """Alg. 1 returns w_ls after SelectUpdate (lines 7-8): aggregated non-norm layers + the client's own norms."""
    engine, seen, out, _ = ska_run
    ckpt = load_checkpoint(out / "ckpt.pt")
    for name, local in ckpt["client_states"].items():
        expected, _ = ska.select_update(ckpt["global_state"], local)
        state = load_model(ckpt, client=name).state_dict()
        assert state.keys() == expected.keys()
        assert all(torch.equal(state[k], v) for k, v in expected.items()), name
    # scored after the round's aggregation: the local record is this model's, for every client
    scored = {m["client"] for m in ckpt["metrics"] if m["scope"] == "local" and m["round"] == 2}
    assert scored == {"synthA", "synthB"}


def _uploads():
    return [Upload("a", {"w": torch.tensor([0.0]), "n": torch.tensor(1)}, 1),
            Upload("b", {"w": torch.tensor([4.0]), "n": torch.tensor(2)}, 3)]


def test_weighting_option_gives_fedavg_and_fedbn_aggregates(tiny_synth):
    from privreid.errors import ConfigError
    from privreid.federated.registry import get_method

    ups = _uploads()
    off = {"an": False, "lsn": False, "dual": False, "head": "linear"}
    for opts, baseline in ((off, "fedavg"), ({"an": False, "dual": False, "head": "linear"}, "fedbn")):
        cfg = ska_config(tiny_synth, **opts, weighting="volume")
        base_cfg = tiny_config(tiny_synth, method=baseline)
        got = ska.SKA.strategy(cfg).aggregate({}, ups).global_state
        want = get_method(baseline).strategy(base_cfg).aggregate({}, ups).global_state
        assert got["w"].item() == want["w"].item() == pytest.approx(3.0)  # (0 * 1 + 4 * 3) / 4
        # same model and same split of its keys into shared and local
        assert ska.SKA.model_config(cfg) == get_method(baseline).model_config(base_cfg)
        state = build_model("resnet18", feat_dim=16, num_classes=3).state_dict()
        mine, theirs = ska.SKA.policy_for(cfg), get_method(baseline).policy_for(base_cfg)
        assert set(mine.local(state)) == set(theirs.local(state)) and set(mine.shared(state)) == set(theirs.shared(state))
    out = ska.SKA.strategy(ska_config(tiny_synth)).aggregate({}, ups).global_state
    assert out["w"].item() == 2.0  # Alg. 1 line 6: 1/K
    with pytest.raises(ConfigError, match="weighting must be one of uniform, volume"):
        ska.SKA.strategy(ska_config(tiny_synth, weighting="cdw"))


@pytest.mark.parametrize("opts,baseline", [({"an": False, "lsn": False, "dual": False, "head": "linear"}, "fedavg"),
                                           ({"an": False, "dual": False, "head": "linear"}, "fedbn")])
def test_table4_ablation_rows_coincide_with_the_baselines(tiny_synth, tmp_path, opts, baseline):
    runs = {}
    for name, cfg in (("ska", ska_config(tiny_synth, **opts, weighting="volume")),
                      (baseline, tiny_config(tiny_synth, method=baseline, rounds=1))):
        FederatedEngine(cfg, federation(cfg), tmp_path / name, progress=False, build=build_run).run()
        runs[name] = load_checkpoint(tmp_path / name / "ckpt.pt")
    a, b = runs["ska"], runs[baseline]
    assert a["global_state"].keys() == b["global_state"].keys()
    assert all(torch.equal(v, b["global_state"][k]) for k, v in a["global_state"].items())
    evals = [[m for m in ckpt["metrics"] if m["scope"] in ("global", "local")] for ckpt in (a, b)]
    assert evals[0] == evals[1] and evals[0]  # the same global and personalised scores


def test_label_smoothing_reaches_the_lg_identity_loss(tiny_synth, monkeypatch):
    import torch.nn.functional as F
    from torch.func import functional_call

    from privreid.federated.client import ClientContext
    from privreid.federated.policy import clone_state
    from privreid.seeding import seed_everything

    checked = []
    original = ska.SKAUpdate.extra_loss

    def spy(self, ctx, pre_neck, feat, logits, labels):
        loss = original(self, ctx, pre_neck, feat, logits, labels)
        lg_logits = self.lg_head(functional_call(ctx.model, self.lg_state, (ctx.images,), strict=False))
        smoothing = self.config.optim.label_smoothing
        checked.append(smoothing)
        assert loss.item() == pytest.approx(F.cross_entropy(lg_logits, labels, label_smoothing=smoothing).item(),
                                            rel=1e-5)
        assert loss.item() != pytest.approx(F.cross_entropy(lg_logits, labels, label_smoothing=0.5).item())
        return loss

    monkeypatch.setattr(ska.SKAUpdate, "extra_loss", spy)
    for smoothing in (0.0, 0.3):
        cfg = tiny_config(tiny_synth, method="ska", max_steps_per_epoch=1, label_smoothing=smoothing)
        client = federation(cfg).clients[0]
        seed_everything(0)
        model = build_model("resnet18", num_classes=client.num_classes, feat_dim=16,
                            transforms=[AttentiveNormTransform(components=2), "dual_norm"])
        ctx = ClientContext(model=model, client=client, round=0, config=cfg, device=torch.device("cpu"),
                            global_state=clone_state(update_policy_shared(model)), seed=1, memory={})
        ska.SKA.make_client_update(cfg)(ctx)
    assert checked == [0.0, 0.3]
