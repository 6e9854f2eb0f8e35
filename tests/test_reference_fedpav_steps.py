"""FedPav's first local steps and one round against its authors' code, cap-ntu/FedReID @ 81a1729.

``tests/reference/fedpav/first_steps.json`` holds what the reference's ``Client.train`` (``client.py:32-103``:
``utils.py`` ``get_optimizer``, its ``nn.CrossEntropyLoss``) and ``Server.train`` / ``aggregate_models``
(``server.py:15-50, 78-109``) computed from privreid's own initial weights (the scaled-down FedPav preset:
ResNet-50, linear 512-d neck, last stride 2, dropout 0) on fixed batches: each step's loss, checksums of
tensors after the steps and of every aggregated parameter (``tests/reference/README.md``, "FedPav first
steps").  Here privreid's FedPav client update and server average run on the same weights and batches.

The reference ran twice: as released, whose identity classifier ``nn.Linear(512, n)`` has a bias that trains
(initialised to zero here), and with that bias frozen at zero, which is privreid's bias-less head.

Every bottleneck's last BN weight (``bn3.weight``) is zero on both sides (torchvision's ``zero_init_residual``,
the fixture's ``zero_init_residual`` flag).  With torchvision's default initialisation this random ResNet-50 is
chaotic at 64x32: float32 gradients differ from float64 ones by 3% relative, so the CPU's convolution kernels
(AVX-512 or AVX2) changed the losses after one step by up to 15%; with the residual branches zeroed the recording
made with AVX2 kernels differs from the native one by at most 1.2e-6 relative (losses 6e-7).
"""

import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from privreid.commands.sweep import base_config
from privreid.data.types import ClientData
from privreid.federated.client import ClientContext
from privreid.federated.registry import get_method
from privreid.federated.strategy import Upload, is_norm_buffer
from privreid.composition import method_of

FIXTURE = json.loads((Path(__file__).parent / "reference" / "fedpav" / "first_steps.json").read_text())
PRESET = Path(__file__).resolve().parents[1] / "configs" / "fedpav-paper.yaml"

# Tolerances.  Losses: relative 1e-5 (float32, the same ops in the same order on both sides: bit-identical
# with the kernels it was recorded with (AVX-512), 6e-7 with torch's AVX2 kernels; a neck trained at the
# backbone's rate instead moves the second loss by 2.2e-5).  Checksums (sum, L1, L2 of a tensor, in float64 over
# float32 values): L1 and L2 relative 1e-5; the sum absolute 1e-5 x the tensor's L1 (a sum can be near zero);
# seen: 6e-8 with AVX-512 (privreid averages in float64, the reference in float32), 1.2e-6 with AVX2; the neck's
# Linear bias (~1e-9, its gradient is zero up to rounding: BatchNorm follows) is within the absolute 1e-7.
LOSS_RTOL = 1e-5
SUM_RTOL = 1e-5


def config():
    return base_config(["--config", str(PRESET), "--opt", "bn_buffers=first", *FIXTURE["privreid_flags"]]).validate()


def batches():
    """The fixture's batches: per client, ``batches`` of 8 images 3x64x32 and labels of ``identities``."""
    g = torch.Generator().manual_seed(FIXTURE["seeds"]["batches"])
    return [[(torch.randn(8, 3, 64, 32, generator=g), torch.randint(0, c["identities"], (8,), generator=g))
             for _ in range(c["batches"])] for c in FIXTURE["clients"]]


def initial_state(cfg):
    """The shared initial model (every ``bn3.weight`` zero, as recorded) and each client's head, seeded as in the
    recording."""
    torch.manual_seed(FIXTURE["seeds"]["model"])
    model = get_method("fedpav").build_model(cfg)
    with torch.no_grad():
        for name, p in model.backbone.named_parameters():
            if FIXTURE["zero_init_residual"] and name.endswith("bn3.weight"):
                p.zero_()
    heads = []
    for seed, c in zip(FIXTURE["seeds"]["heads"], FIXTURE["clients"]):
        torch.manual_seed(seed)
        heads.append(model.new_head(c["identities"]))
    return model, heads


def checksum(t):
    t = t.detach().double()
    return {"sum": float(t.sum()), "l1": float(t.abs().sum()), "l2": float(t.norm())}


def matches(ours, ref):
    return (abs(ours["sum"] - ref["sum"]) <= SUM_RTOL * ref["l1"] + 1e-7
            and ours["l1"] == pytest.approx(ref["l1"], rel=SUM_RTOL, abs=1e-7)
            and ours["l2"] == pytest.approx(ref["l2"], rel=SUM_RTOL, abs=1e-7))


def run_round():
    """privreid's FedPav round: each client's update from the shared model and its head, then the average.

    Returns ``{client: {"losses", "state"}}`` and the aggregated global state.
    """
    cfg = config()
    method = get_method("fedpav")
    model, heads = initial_state(cfg)
    shared = {k: v.clone() for k, v in method.policy.shared(model.state_dict()).items()}
    out, uploads = {}, []
    for c, head, data in zip(FIXTURE["clients"], heads, batches()):
        model.load_state_dict(shared, strict=False)
        model.classifier = head
        images = torch.cat([x for x, _ in data])
        labels = torch.cat([y for _, y in data])
        dataset = TensorDataset(images, labels, torch.zeros_like(labels))
        losses = []

        class Update(method.make_client_update):
            def __init__(self, config):
                super().__init__(config)
                criterion = self.criterion

                def recording(logits, y):
                    loss = criterion(logits, y)
                    losses.append(float(loss.detach()))
                    return loss

                self.criterion = recording

            def loader(self, ctx, epoch):
                return DataLoader(dataset, batch_size=8, shuffle=False)

        ctx = ClientContext(model=model, client=ClientData(c["name"], "d", []), round=0, config=cfg,
                            device=torch.device("cpu"), global_state=shared, seed=0)
        Update(cfg)(ctx)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        out[c["name"]] = {"losses": losses, "state": state}
        uploads.append(Upload(c["name"], method.policy.shared(state), len(labels)))
    order = FIXTURE["bias_frozen"]["client_order"]  # bn_buffers=first: the reference's first client's statistics
    uploads.sort(key=lambda u: order.index(u.client))
    return out, method.strategy(cfg).aggregate({}, uploads).global_state


@pytest.fixture(scope="module")
def ours():
    return run_round()


def test_first_steps_losses_are_the_reference_with_a_bias_less_classifier(ours):
    clients, _ = ours
    ref = FIXTURE["bias_frozen"]["clients"]
    for name, run in clients.items():
        assert len(run["losses"]) == len(ref[name]["losses"]) > 0
        assert run["losses"] == pytest.approx(ref[name]["losses"], rel=LOSS_RTOL), name
        # the reference's epoch loss: running mean over the images of whole batches (client.py:78, 81-82)
        assert sum(run["losses"]) / len(run["losses"]) == pytest.approx(ref[name]["epoch_loss"], rel=LOSS_RTOL)


def test_weights_after_the_steps_are_the_references(ours):
    """Parameters and the neck's BN statistics after the local steps (before the reference's CDW probe)."""
    clients, _ = ours
    ref = FIXTURE["bias_frozen"]["clients"]
    for name, run in clients.items():
        for key, expected in ref[name]["after_steps"].items():
            assert matches(checksum(run["state"][key]), expected), (name, key)


def test_aggregated_parameters_are_the_references(ours):
    """``server.py`` aggregate_models averages parameters by data size (24 and 16 images here)."""
    _, global_state = ours
    ref = FIXTURE["bias_frozen"]["aggregated_parameters"]
    assert set(ref) == {k for k in global_state if not is_norm_buffer(k)}
    for key, expected in ref.items():
        assert matches(checksum(global_state[key]), expected), key


def test_released_classifier_bias_changes_the_losses_from_the_second_step(ours):
    """Deviation ``fedpav-classifier-bias``: privreid's identity classifier has no bias; the reference's ``ClassBlock`` classifier
    ``nn.Linear(512, n)`` has one that trains at the classifier rate (``model.py:59-62``).  The first loss is the
    same (the bias starts at zero); from the second step on the losses differ by more than the tolerance."""
    clients, _ = ours
    released = FIXTURE["released"]["clients"]
    frozen = FIXTURE["bias_frozen"]["clients"]
    for name, run in clients.items():
        assert run["losses"][0] == pytest.approx(released[name]["losses"][0], rel=LOSS_RTOL)
        assert released[name]["losses"][0] == frozen[name]["losses"][0]
        for step in range(1, len(run["losses"])):
            assert run["losses"][step] != pytest.approx(released[name]["losses"][step], rel=10 * LOSS_RTOL)
    assert "classifier.bias" not in clients["c0"]["state"]
    from privreid.config import RunConfig
    from privreid.deviations import deviations

    # the deviation entry that states it, in every FedPav run (RunConfig's default method is fedpav)
    assert any(d.startswith("the identity classifier has no bias") and "model.py:29-31, 59-62" in d
               for d in deviations(RunConfig(), method_of(RunConfig())))


def test_first_client_bn_statistics_differ_by_the_references_cdw_probe(ours):
    """Deviation ``fedpav-cdw-probe``: after training, the reference runs a train-mode forward of a training
    batch for its CDW distance even without CDW (``client.py:102``, ``optimization.py:9-25``), which moves the
    uploaded BatchNorm statistics; privreid runs no probe.  With ``bn_buffers=first`` both take the first
    client's statistics: privreid's are that client's after its steps (as recorded before the probe), the
    reference's differ by the probe's update."""
    clients, global_state = ours
    first = FIXTURE["bias_frozen"]["client_order"][0]
    ref = FIXTURE["bias_frozen"]["aggregated_buffers"]
    assert ref
    for key, expected in ref.items():
        assert torch.equal(global_state[key], clients[first]["state"][key]), key
        assert not matches(checksum(global_state[key]), expected), key
    for key in ("neck.bn.running_mean", "neck.bn.running_var"):
        assert matches(checksum(global_state[key]), FIXTURE["bias_frozen"]["clients"][first]["after_steps"][key])
