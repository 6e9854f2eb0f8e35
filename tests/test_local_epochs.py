"""The local-epoch loop of :class:`SupervisedUpdate` under ``--max-steps``."""

import torch
from torch.utils.data import DataLoader, Dataset

from privreid.config import OptimConfig, RunConfig
from privreid.data.types import ClientData
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.models import build_model


class CountingImages(Dataset):
    """Eight random 32x16 images of 4 identities; counts the items it was asked for."""

    def __init__(self):
        self.loaded = 0

    def __len__(self):
        return 8

    def __getitem__(self, i):
        self.loaded += 1
        return torch.rand(3, 32, 16), i % 4, 0


def test_capped_epochs_load_exactly_the_capped_batches():
    # 8 images in batches of 2 = 4 batches per epoch, capped at 1: each of the 2 epochs loads 1 batch.
    # The old loop broke out only after loading a batch past the cap (2 images per epoch more), and that
    # batch's augmentation draws shifted the random stream of every later epoch and client.
    config = RunConfig(optim=OptimConfig(batch_size=2, local_epochs=2, max_steps_per_epoch=1, triplet_weight=0.0))
    data = CountingImages()

    class Update(SupervisedUpdate):
        def loader(self, ctx, epoch):
            return DataLoader(data, batch_size=2, shuffle=False)

    model = build_model("resnet18", num_classes=4, feat_dim=16)
    ctx = ClientContext(model=model, client=ClientData("c0", "d0", []), round=0, config=config,
                        device=torch.device("cpu"), global_state={}, seed=0)
    metrics = Update(config)(ctx)
    assert metrics["steps"] == 2 and metrics["samples_seen"] == 4
    assert data.loaded == 4
