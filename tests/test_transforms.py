"""build_transforms: output shapes, normalisation by hand, and the pipeline composition."""

import pytest
import torch
import torchvision.transforms as T
from PIL import Image

from privreid.data import IMAGENET_MEAN, IMAGENET_STD, build_transforms
from privreid.errors import ConfigError

COLOUR = (200, 100, 50)


def constant_image():
    return Image.new("RGB", (8, 16), COLOUR)


def expected(mean=IMAGENET_MEAN, std=IMAGENET_STD):
    return torch.tensor([(c / 255 - m) / s for c, m, s in zip(COLOUR, mean, std)])


def test_test_transform_shape_and_normalisation():
    out = build_transforms(32, 16, train=False)(constant_image())
    assert out.shape == (3, 32, 16) and out.dtype == torch.float32
    assert torch.allclose(out, expected().view(3, 1, 1).expand(3, 32, 16), atol=1e-5)


def test_custom_normalisation():
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.5, 1.0)
    out = build_transforms(8, 4, train=False, norm_mean=mean, norm_std=std)(constant_image())
    assert torch.allclose(out[:, 0, 0], expected(mean, std), atol=1e-5)


def test_train_transform_shape_and_values():
    torch.manual_seed(0)
    out = build_transforms(32, 16, train=True, random_erasing=1.0)(constant_image())
    assert out.shape == (3, 32, 16)
    # Each pixel is the normalised colour, black padding, or 0 where erased.
    black = (torch.zeros(3) - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    kinds = [
        next(i for i, ref in enumerate((expected(), black, torch.zeros(3))) if torch.allclose(px, ref, atol=1e-5))
        for px in out.reshape(3, -1).T
    ]
    assert 0 in kinds and 2 in kinds  # the image shows, and something was erased (p=1)
    # Without augmentation the train pipeline equals the test one.
    plain = build_transforms(32, 16, train=True, flip=False, pad=0, random_erasing=0)
    assert torch.equal(plain(constant_image()), build_transforms(32, 16, train=False)(constant_image()))


def test_pipeline_composition():
    names = [type(t).__name__ for t in build_transforms(256, 128, train=True).transforms]
    assert names == ["Resize", "RandomHorizontalFlip", "Pad", "RandomCrop", "ToTensor", "Normalize", "RandomErasing"]
    train = build_transforms(256, 128, train=True, pad=4, random_erasing=0.3).transforms
    assert train[2].padding == 4 and train[-1].p == 0.3 and train[-1].value == 0
    assert [type(t).__name__ for t in build_transforms(256, 128, train=False).transforms] == [
        "Resize",
        "ToTensor",
        "Normalize",
    ]
    assert isinstance(build_transforms(256, 128, train=False), T.Compose)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"height": 0}, "image size"),
        ({"pad": -1}, "pad"),
        ({"random_erasing": 1.5}, "random_erasing"),
    ],
)
def test_invalid_arguments(kwargs, match):
    args = {"height": 16, "width": 8, "train": True, **kwargs}
    with pytest.raises(ConfigError, match=match):
        build_transforms(**args)


def test_default_padding_scales_with_width():
    # BoT pads 10 px at 256x128; smaller inputs get proportionally less
    assert build_transforms(256, 128, train=True).transforms[2].padding == 10
    assert build_transforms(64, 32, train=True).transforms[2].padding == 2
    assert build_transforms(16, 8, train=True).transforms[2].padding == 1
