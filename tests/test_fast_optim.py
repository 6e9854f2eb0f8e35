"""The optimiser implementation: the fastest one that trains the per-tensor loop's weights bit for bit."""

import copy

import pytest
import torch

from privreid.config import OptimConfig, RunConfig
from privreid.federated import fast_optim
from privreid.federated.client import SupervisedUpdate
from privreid.models import build_model

SGD = dict(momentum=0.9, weight_decay=5e-4, nesterov=True)


def train(model, opt, steps=3):
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(4, 3, 32, 16, generator=generator)
        y = torch.randint(0, 5, (4,), generator=generator)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model.forward_train(x)[2], y).backward()
        opt.step()
    return model.state_dict()


@pytest.mark.parametrize("kind, hyper", [("sgd", SGD), ("sgd", dict(momentum=0.0, weight_decay=0.0)),
                                         ("adam", dict(weight_decay=5e-4))])
def test_chosen_implementation_trains_the_per_tensor_weights_exactly(kind, hyper):
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=5, feat_dim=16)
    groups = lambda m: [{"params": list(m.classifier.parameters()), "lr": 0.05},  # noqa: E731
                        {"params": [p for n, p in m.named_parameters() if not n.startswith("classifier")],
                         "lr": 0.005}]
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    lr_kind = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[kind]
    reference = train(a, lr_kind(groups(a), foreach=False, **hyper))
    fast = train(b, fast_optim.build(kind, groups(b), "cpu", **hyper))
    assert all(torch.equal(reference[k], fast[k]) for k in reference)


def test_sgd_uses_a_multi_tensor_implementation_on_cpu():
    assert fast_optim.implementation("sgd", "cpu", **SGD) in ({"fused": True}, {"foreach": True})


def test_a_candidate_that_changes_the_bits_is_refused(monkeypatch):
    """A fused kernel whose rounding differs from the loop's is skipped for foreach."""
    real = fast_optim._probe

    def probe(kind, device, hyper, impl):
        out = real(kind, device, hyper, impl)
        return [p + 1e-7 for p in out] if impl.get("fused") else out

    monkeypatch.setattr(fast_optim, "_probe", probe)
    monkeypatch.setattr(fast_optim, "_CHOICE", {})
    assert fast_optim.implementation("sgd", "cpu", **SGD) == {"foreach": True}


def test_the_check_leaves_the_global_random_stream_alone(monkeypatch):
    monkeypatch.setattr(fast_optim, "_CHOICE", {})
    state = torch.get_rng_state()
    fast_optim.implementation("sgd", "cpu", **SGD)
    assert torch.equal(state, torch.get_rng_state())


def test_client_optimiser_uses_it():
    model = build_model("resnet18", num_classes=5, feat_dim=16)
    for name in ("sgd", "adam"):
        opt = SupervisedUpdate(RunConfig(optim=OptimConfig(optimizer=name))).optimizer(model, 0)
        assert opt.defaults.get("fused") or opt.defaults.get("foreach"), name
