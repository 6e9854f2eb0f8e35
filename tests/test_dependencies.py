"""The deliberately pinned third-party stack (see pyproject.toml and Makefile)."""
import importlib.metadata as md

import torch


def test_torchattacks_is_the_pinned_release_and_runs():
    import torchattacks

    assert md.version("torchattacks") == "3.5.1"
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 3)).eval()
    x = torch.rand(2, 3, 4, 4)
    y = torch.tensor([0, 1])
    adv = torchattacks.PGD(model, eps=4 / 255, alpha=1 / 255, steps=3)(x, y)
    assert adv.shape == x.shape
    assert (adv - x).abs().max() <= 4 / 255 + 1e-6
    assert adv.min() >= 0 and adv.max() <= 1


def test_pinned_versions():
    assert md.version("opacus") == "1.6.0"
    assert md.version("kornia") == "0.9.0"
    assert md.version("flwr").startswith("1.41.")
    assert md.version("scikit-image").startswith("0.26.")
