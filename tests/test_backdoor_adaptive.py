"""Backdoors built to pass the defenses (issue 43): constrain-and-scale / projection, Neurotoxin, blended triggers,
on hand-computed updates."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import tiny_config
from privreid.data.catalog import federation_for_config
from privreid.data.trigger import Trigger
from privreid.errors import ConfigError
from privreid.malicious_clients import get_malicious_client
from privreid.malicious_clients.constrain_scale import project_update
from privreid.malicious_clients.neurotoxin import PREVIOUS, neurotoxin_mask


def _ctx(weight, running_mean, global_weight=(0.0, 0.0), global_mean=(0.0, 0.0), memory=None):
    """A client holding a BatchNorm layer trained to ``weight`` / ``running_mean`` (bias 0, variance 1, 5 batches),
    the server having transmitted ``global_weight`` / ``global_mean`` (bias 0, variance 1, 0 batches)."""
    model = torch.nn.BatchNorm1d(2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor(weight))
        model.bias.zero_()
        model.running_mean.copy_(torch.tensor(running_mean))
        model.num_batches_tracked.fill_(5)
    sent = {"weight": torch.tensor(global_weight), "bias": torch.zeros(2), "running_mean": torch.tensor(global_mean),
            "running_var": torch.ones(2), "num_batches_tracked": torch.tensor(0)}
    return SimpleNamespace(model=model, global_state=sent, memory={} if memory is None else memory)


def test_projection_onto_the_ball_counts_batchnorm_statistics_and_leaves_integers():
    """delta = (weight 3, 0; running mean 0, 4): ||delta|| = 5 only with the BN statistic; bound 1 scales it by
    1/5; inside the ball (bound 10) nothing moves; to_bound scales it to 10 (factor 2)."""
    ctx = _ctx([3.0, 0.0], [0.0, 4.0])
    assert project_update(ctx, 1.0) == pytest.approx(5.0)
    state = ctx.model.state_dict()
    assert state["weight"].tolist() == pytest.approx([0.6, 0.0]) and state["running_mean"].tolist() == pytest.approx(
        [0.0, 0.8])
    assert state["running_var"].tolist() == [1.0, 1.0] and int(state["num_batches_tracked"]) == 5
    inside = _ctx([3.0, 0.0], [0.0, 4.0])
    project_update(inside, 10.0)
    assert inside.model.state_dict()["weight"].tolist() == [3.0, 0.0]
    boosted = _ctx([3.0, 0.0], [0.0, 4.0], global_weight=(1.0, 1.0))  # delta (2, -1; 0, 4): norm sqrt(21)
    project_update(boosted, 10.0, to_bound=True)
    factor = 10 / 21 ** 0.5
    assert boosted.model.state_dict()["weight"].tolist() == pytest.approx([1 + 2 * factor, 1 - factor])
    assert boosted.model.state_dict()["running_mean"].tolist() == pytest.approx([0.0, 4 * factor])


def test_constrain_scale_uploads_within_its_bound(tiny_synth):
    cfg = tiny_config(tiny_synth)
    clients = federation_for_config(cfg).clients
    adversary = get_malicious_client("constrain-scale")
    assert "boost" not in adversary.options
    settings = {**adversary.options, "bound": 2.0}
    adversary.check(settings, clients, clients[-1:], cfg)
    ctx = _ctx([3.0, 0.0], [0.0, 4.0])
    adversary.poison_upload(ctx, settings)
    state = ctx.model.state_dict()
    assert float(torch.cat([state["weight"], state["running_mean"]]).norm()) == pytest.approx(2.0)
    for bad, says in (({"bound": 0}, "bound must be a number > 0"), ({"to_bound": "yes"}, "to_bound must be")):
        with pytest.raises(ConfigError, match=says):
            adversary.check({**adversary.options, **bad}, clients, clients[-1:], cfg)


def test_neurotoxin_masks_the_largest_coordinates_of_the_update_over_all_entries():
    update = {"a": torch.tensor([0.1, -5.0, 2.0]), "b": torch.tensor([[3.0, 0.2]])}
    masks = neurotoxin_mask(update, 0.4)  # floor(0.4 * 5) = 2: -5 and 3
    assert masks["a"].tolist() == [1, 0, 1] and masks["b"].tolist() == [[0, 1]]
    ties = neurotoxin_mask({"a": torch.ones(2), "b": torch.ones(1)}, 0.34)  # floor(1.02) = 1: the first
    assert ties["a"].tolist() == [0, 1] and ties["b"].tolist() == [1]
    assert all(m.all() for m in neurotoxin_mask(update, 0.0).values())


def test_neurotoxin_keeps_the_update_off_what_the_last_global_update_changed_most(tiny_synth):
    """First participation: nothing masked, the received model remembered.  Next: the global model moved by
    (weight 0, 2; bias 0; mean 0.5, 0; var 0): ratio 0.25 of 8 coordinates masks the 2 largest, weight[1] (2) and
    mean[0] (0.5); the upload keeps the global values there and the trained ones elsewhere."""
    cfg = tiny_config(tiny_synth)
    clients = federation_for_config(cfg).clients
    adversary = get_malicious_client("neurotoxin")
    settings = {**adversary.options, "ratio": 0.25}
    adversary.check(settings, clients, clients[-1:], cfg)
    first = _ctx([3.0, 4.0], [1.0, 1.0])
    adversary.poison_upload(first, settings)
    assert first.model.state_dict()["weight"].tolist() == [3.0, 4.0]
    assert first.memory[PREVIOUS + "weight"].tolist() == [0.0, 0.0] and PREVIOUS + "num_batches_tracked" not in first.memory
    second = _ctx([3.0, 4.0], [1.0, 1.0], global_weight=(0.0, 2.0), global_mean=(0.5, 0.0), memory=first.memory)
    adversary.poison_upload(second, settings)
    state = second.model.state_dict()
    assert state["weight"].tolist() == [3.0, 2.0] and state["running_mean"].tolist() == [0.5, 1.0]
    assert second.memory[PREVIOUS + "weight"].tolist() == [0.0, 2.0]
    with pytest.raises(ConfigError, match=r"ratio must lie in \[0, 1\)"):
        adversary.check({**adversary.options, "ratio": 1}, clients, clients[-1:], cfg)


def test_the_blended_trigger_mixes_the_whole_image_with_a_seeded_key():
    """x' = (1 - alpha) x + alpha k (Chen et al. Eq. 2): alpha 1 stamps the key itself; on a grey image of 100
    at alpha 0.25, a key pixel 0 gives 75 and 255 gives 138.75 -> 139."""
    blank = torch.zeros((3, 8, 4), dtype=torch.uint8)
    key = Trigger(1, seed=3, kind="blend", alpha=1.0).stamp(blank)
    assert key.unique().numel() > 2  # uniform in [0, 255], not black and white
    assert not torch.equal(key, Trigger(1, seed=4, kind="blend", alpha=1.0).stamp(blank))
    grey = torch.full((3, 8, 4), 100, dtype=torch.uint8)
    assert torch.equal(Trigger(1, seed=3, kind="blend", alpha=0.25).stamp(grey),
                       (75 + key.double() / 4).round().to(torch.uint8))
    assert Trigger(1, seed=3, kind="blend", alpha=0.25).stamp(torch.zeros((3, 8, 4), dtype=torch.uint8))[
        key == 255].unique().tolist() == [64]  # 63.75 -> 64
    settings = {"trigger": "blend", "alpha": 0.5, "size": 99, "position": "center", "pattern_seed": 1}
    trigger = Trigger.from_settings(settings)
    trigger.check_fits(8, 4)  # no patch to fit
    assert trigger.describe() == "blended key (alpha 0.5), pattern seed 1"
    for bad, says in (({"trigger": "star"}, "trigger must be one of patch, blend"),
                      ({"alpha": 0}, r"alpha must lie in \(0, 1\]")):
        with pytest.raises(ConfigError, match=says):
            Trigger.from_settings({**settings, **bad})
    with pytest.raises(ConfigError, match="splits a patch trigger"):
        trigger.part(0, 2)
