"""No host-device synchronisation per step (issue 42): training, evaluation, DP-SGD and inversion.

A sync is a read of a tensor's value by the host: ``.item()``, ``.tolist()``,
``.cpu()``, ``bool()`` / ``float()`` / ``int()`` of a tensor (a Python
conditional on a tensor, a metric accumulated as a Python number).  On a GPU
each one waits for the queued kernels, so the host cannot run ahead.  The
loops read their logged values once, at the end (accumulated as tensors on the
device), so the count of such reads must not grow with the number of steps:
each loop runs 2 and 6 steps and the counts must be equal.

On the CPU every tensor is a host tensor, so the reads of tensors that live on
the host by construction, on any device, are not counted: the random parameters
of the augmentation (drawn from the global CPU generator, as torchvision draws
them), the data loader's samplers (their own CPU generators) and the optimisers'
step counters (``state["step"]``, a CPU tensor unless ``capturable``).  A CUDA
run can check the rest with ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import collections
import math
import sys

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from privreid.config import RunConfig
from privreid.data.catalog import federation_for_config
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.models import build_model

from conftest import tiny_config

READS = ("item", "tolist", "cpu", "__bool__", "__float__", "__int__", "__index__")
#: callers whose reads are of host tensors on any device (module docstring)
HOST_ONLY = ("/torch/optim/", "/torch/utils/data/", "/torchvision/transforms/", "/privreid/data/transforms.py",
             "/privreid/data/sampler.py", "/opacus/utils/uniform_sampler.py")


class SyncCounter:
    """Counts the reads of tensor values (``READS``) by their caller ``file:line``, while the context is open."""

    def __init__(self) -> None:
        self.calls: collections.Counter = collections.Counter()

    def __enter__(self) -> "SyncCounter":
        self.saved = {name: getattr(torch.Tensor, name) for name in READS}
        for name, original in self.saved.items():
            setattr(torch.Tensor, name, self._counting(name, original))
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self.saved.items():
            setattr(torch.Tensor, name, original)

    def _counting(self, name, original):
        calls = self.calls

        def read(tensor, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
            if not any(part in caller for part in HOST_ONLY):
                calls[f"{name} {caller}:{sys._getframe(1).f_lineno}"] += 1
            return original(tensor, *args, **kwargs)

        return read

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def counted(run, steps: int) -> SyncCounter:
    torch.manual_seed(0)
    with SyncCounter() as counter:
        run(steps)
    return counter


def assert_constant(run) -> None:
    few, many = counted(run, 2), counted(run, 6)
    grown = {k: (few.calls.get(k, 0), v) for k, v in many.calls.items() if v > few.calls.get(k, 0)}
    assert few.total == many.total, f"reads that grow with the steps (2 steps, 6 steps): {grown}"


def _train(config: RunConfig, update, steps: int, transforms=()) -> dict:
    federation = federation_for_config(config)
    client = federation.clients[0]
    model = build_model("resnet18", num_classes=client.num_classes, feat_dim=16, transforms=list(transforms))
    ctx = ClientContext(model=model, client=client, round=0, config=config, device=torch.device("cpu"),
                        global_state={}, seed=0)
    return update(ctx)


def test_training_reads_nothing_per_step(tiny_synth):
    def run(steps):
        config = tiny_config(tiny_synth, batch_size=4, max_steps_per_epoch=steps, triplet_weight=0.0)
        metrics = _train(config, SupervisedUpdate(config), steps)
        assert metrics["steps"] == steps

    assert_constant(run)


def test_triplet_training_reads_nothing_per_step(tiny_synth):
    """The batch-hard triplet loss picks its valid anchors on the device (PK batches)."""
    def run(steps):
        config = tiny_config(tiny_synth, batch_size=4, max_steps_per_epoch=steps, triplet_weight=1.0,
                             instances_per_id=2)
        metrics = _train(config, SupervisedUpdate(config), steps)
        assert metrics["steps"] == steps

    assert_constant(run)


def test_triplet_loss_is_the_mean_over_valid_anchors():
    """Hand-made distances: anchors 0-3 valid, 4 without a positive (ignored); none valid: 0 with a gradient."""
    from privreid.losses import batch_hard_triplet_loss

    features = torch.tensor([[0.0], [1.0], [3.0], [7.0], [20.0]], requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1, 2])
    # hardest positive / negative: 0: 1 / 3, 1: 1 / 2, 2: 4 / 2, 3: 4 / 6 -> relu(d_ap - d_an + 0.3)
    want = (0.0 + 0.0 + 2.3 + 0.0) / 4
    assert batch_hard_triplet_loss(features, labels).item() == pytest.approx(want)
    alone = batch_hard_triplet_loss(features, torch.tensor([0, 1, 2, 3, 4]))
    assert alone.item() == 0.0 and alone.requires_grad


def test_circle_loss_reads_nothing_and_drops_anchors_without_pairs():
    """DPPT's circle loss picks its valid anchors on the device; an anchor without a positive adds nothing.

    Two unit features per label at angle 0 / 90 degrees: s_p = 1 and s_n = 0 for labels 0 and 1, so with margin m
    and gamma g every valid anchor has one p-term -g m^2 and two n-terms g m (0 - m): its loss is
    softplus(-2 g m^2 + log 2); label 2's lone anchor has no positive and is dropped."""
    from privreid.losses import circle_loss

    features = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 1.0]], requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1, 2])
    m, g = 0.45, 64.0
    with SyncCounter() as counter:
        loss = circle_loss(features[:4], labels[:4], margin=m, gamma=g)
        loss.backward()
        mixed = circle_loss(features, labels, margin=m, gamma=g)
        none = circle_loss(features[:2], torch.tensor([0, 1]), margin=m, gamma=g)
    assert counter.total == 0, counter.calls
    want = torch.nn.functional.softplus(torch.tensor(-2 * g * m * m + math.log(2), dtype=torch.float64)).item()
    assert loss.item() == pytest.approx(want, rel=1e-5) and torch.isfinite(features.grad).all()
    # the lone anchor (label 2) is dropped, but it is a negative of the others: their n-terms grow
    s_n = 1 / 2 ** 0.5
    extra = g * (s_n + m) * (s_n - m)
    one = torch.logsumexp(torch.tensor([g * m * (0 - m), g * m * (0 - m), extra], dtype=torch.float64), 0) - g * m * m
    assert mixed.item() == pytest.approx(torch.nn.functional.softplus(one).item(), rel=1e-5)
    assert none.item() == 0.0 and none.requires_grad


def test_adam_training_reads_nothing_per_step(tiny_synth):
    def run(steps):
        config = tiny_config(tiny_synth, batch_size=4, max_steps_per_epoch=steps, triplet_weight=0.0, optimizer="adam",
                             local_epochs=2)
        assert _train(config, SupervisedUpdate(config), steps)["steps"] == 2 * steps

    assert_constant(run)


def test_dp_sgd_step_reads_nothing_per_step(tiny_synth):
    from privreid.defenses.dp_sgd.mechanism import DPSGDUpdate

    def run(steps):
        config = tiny_config(tiny_synth, batch_size=4, max_steps_per_epoch=steps, triplet_weight=0.0,
                             dp_sgd=True, noise_multiplier=1.0, delta=1e-3)
        metrics = _train(config, DPSGDUpdate(SupervisedUpdate(config), config), steps, transforms=["group_norm"])
        assert metrics["steps"] == steps

    assert_constant(run)


def test_evaluation_reads_nothing_per_batch():
    from privreid.evaluation.features import extract_features

    model = build_model("resnet18", num_classes=4, feat_dim=16)

    def run(batches):
        data = TensorDataset(torch.rand(4 * batches, 3, 32, 16), torch.arange(4 * batches), torch.zeros(4 * batches))
        feats, pids, _ = extract_features(model, DataLoader(data, batch_size=4), flip=True)
        assert len(feats) == 4 * batches
        assert list(pids) == list(range(4 * batches))

    assert_constant(run)


@pytest.mark.parametrize("select", ["best", "last"])
def test_inversion_reads_nothing_per_iteration(select):
    from privreid.inversion.attack import reconstruct
    from privreid.inversion.settings import InversionSettings

    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=4, feat_dim=16).eval()
    shared = {n for n, _ in model.named_parameters() if not n.startswith("classifier.")}
    subject = torch.rand(3, 32, 16, generator=torch.Generator().manual_seed(1))

    def run(iterations):
        settings = InversionSettings(attack="ig", iterations=iterations, select=select, restarts=2)
        reconstruct(model, subject, 2, threat="full", shared=shared, settings=settings, seed=0)

    assert_constant(run)
