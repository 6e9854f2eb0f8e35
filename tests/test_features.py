"""Tests for privreid.evaluation.features.extract_features."""

import numpy as np
import pytest
import torch
from torch import nn

from privreid.errors import ConfigError, DataError
from privreid.evaluation import extract_features


class LeftRight(nn.Module):
    """Feature = (sum of the left half of the image, sum of the right half).

    Under a horizontal flip the two entries swap, so the flip-averaged
    feature is (total / 2, total / 2).  Dropout makes eval mode observable.
    """

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(p=0.9)

    def forward(self, x):
        half = x.shape[-1] // 2
        left = x[..., :half].sum(dim=(1, 2, 3))
        right = x[..., half:].sum(dim=(1, 2, 3))
        return self.drop(torch.stack([left, right], dim=1))


def make_loader():
    # Two batches of 1x1x4 "images"; widths are the last dimension.
    images = torch.tensor([[[[1.0, 2.0, 3.0, 4.0]]],
                           [[[0.0, 0.0, 0.0, 10.0]]],
                           [[[5.0, 0.0, 0.0, 1.0]]]])
    return [
        (images[:2], torch.tensor([7, 8]), torch.tensor([0, 1])),
        (images[2:], [9], np.array([2])),
    ]


def test_features_labels_and_mode_restoration():
    model = LeftRight().train()
    feats, pids, camids = extract_features(model, make_loader())
    # Dropout is off in eval mode, so the features are exact.
    torch.testing.assert_close(feats, torch.tensor([[3.0, 7.0], [0.0, 10.0], [5.0, 1.0]]))
    assert feats.dtype == torch.float32 and feats.device.type == "cpu"
    assert not feats.requires_grad
    np.testing.assert_array_equal(pids, [7, 8, 9])
    np.testing.assert_array_equal(camids, [0, 1, 2])
    assert pids.dtype == np.int64 and camids.dtype == np.int64
    assert model.training  # restored

    model.eval()
    extract_features(model, make_loader())
    assert not model.training


def test_flip_averages_image_and_mirror():
    # Flipped image [4, 3, 2, 1] -> (7, 3); average with (3, 7) -> (5, 5).
    feats, _, _ = extract_features(LeftRight(), make_loader(), flip=True)
    torch.testing.assert_close(feats, torch.tensor([[5.0, 5.0], [5.0, 5.0], [3.0, 3.0]]))


def test_progress_bar_option():
    feats, _, _ = extract_features(LeftRight(), make_loader(), progress=True)
    assert feats.shape == (3, 2)


def test_errors_restore_mode():
    model = LeftRight().train()
    with pytest.raises(DataError, match="no batches"):
        extract_features(model, [])
    with pytest.raises(DataError, match="triple"):
        extract_features(model, [(torch.zeros(1, 1, 1, 2), [1])])
    with pytest.raises(DataError, match="2 pids"):
        extract_features(model, [(torch.zeros(1, 1, 1, 2), [1, 2], [0])])
    with pytest.raises(ConfigError, match=r"\(B, D\)"):
        extract_features(nn.Flatten(0), [(torch.zeros(2, 1, 1, 2), [1, 2], [0, 0])])
    assert model.training
