"""Channel augmentation (Ye et al. 2021; L2RW+ Sec. III-B) and its grayscale ablation on tiny tensors."""

import pytest
import torch
from PIL import Image

from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD, ChannelAugmentation, build_transforms
from privreid.errors import ConfigError


def tiny_image():
    torch.manual_seed(123)
    return torch.rand(3, 4, 2)


def test_channel_mode_replicates_one_input_channel():
    image = tiny_image()
    original = image.clone()
    picked = set()
    for seed in range(30):
        torch.manual_seed(seed)
        out = ChannelAugmentation("channel", p=1.0)(image)
        assert out.shape == image.shape and out.dtype == image.dtype
        matches = [c for c in range(3) if all(torch.equal(out[k], image[c]) for k in range(3))]
        assert len(matches) == 1
        picked.add(matches[0])
    assert picked == {0, 1, 2}  # R, G and B are all drawn
    assert torch.equal(image, original)  # the input is not modified


def test_gray_mode_is_the_luma_on_every_channel():
    image = tiny_image()
    out = ChannelAugmentation("gray", p=1.0)(image)
    luma = 0.2989 * image[0] + 0.587 * image[1] + 0.114 * image[2]
    for c in range(3):
        assert torch.allclose(out[c], luma, atol=1e-6)


def test_off_modes_and_probability():
    image = tiny_image()
    assert ChannelAugmentation("none", p=1.0)(image) is image
    assert ChannelAugmentation("channel", p=0.0)(image) is image
    torch.manual_seed(0)
    aug = ChannelAugmentation("channel", p=0.5)
    changed = sum(not torch.equal(aug(image), image) for _ in range(400))
    assert 160 <= changed <= 240  # Binomial(400, 0.5): mean 200, sd 10


def test_one_draw_per_clip():
    torch.manual_seed(5)
    clip = torch.rand(4, 3, 4, 2)  # T frames
    for seed in range(10):
        torch.manual_seed(seed)
        out = ChannelAugmentation("channel", p=1.0)(clip)
        channel = next(c for c in range(3) if torch.equal(out[0, 0], clip[0, c]))
        assert torch.equal(out, clip[:, channel:channel + 1].expand_as(clip))


def test_in_build_transforms_before_normalisation():
    pixels = Image.new("RGB", (2, 4), (200, 100, 50))
    mean, std = torch.tensor(IMAGENET_MEAN), torch.tensor(IMAGENET_STD)
    plain = dict(train=True, flip=False, pad=0, random_erasing=0.0)
    torch.manual_seed(0)
    out = build_transforms(4, 2, channel_aug="channel", channel_aug_p=1.0, **plain)(pixels)
    value = next(v for v in (200, 100, 50) if torch.allclose(out[:, 0, 0], (v / 255 - mean) / std, atol=1e-5))
    assert torch.allclose(out, ((value / 255 - mean) / std).view(3, 1, 1).expand(3, 4, 2), atol=1e-5)
    gray = build_transforms(4, 2, channel_aug="gray", channel_aug_p=1.0, **plain)(pixels)
    luma = (0.2989 * 200 + 0.587 * 100 + 0.114 * 50) / 255
    assert torch.allclose(gray, ((luma - mean) / std).view(3, 1, 1).expand(3, 4, 2), atol=1e-5)
    # default unchanged, and no augmentation at test time
    assert not any(isinstance(s, ChannelAugmentation) for s in build_transforms(4, 2, train=True).transforms)
    assert not any(isinstance(s, ChannelAugmentation)
                   for s in build_transforms(4, 2, train=False, channel_aug="channel").transforms)


def test_errors():
    with pytest.raises(ConfigError, match="unknown channel augmentation"):
        ChannelAugmentation("rgb")
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        build_transforms(4, 2, train=True, channel_aug="gray", channel_aug_p=1.5)
    with pytest.raises(ValueError, match="3, H, W"):
        ChannelAugmentation("channel", p=1.0)(torch.rand(1, 4, 2))


def test_one_channel_draw_per_clip():
    """V-DPPT: within one_draw_per_clip every frame of a clip gets the same channel (or none); outside, frames differ."""
    import torchvision.transforms as T

    from privreid.data.transforms import ChannelAugmentation, one_draw_per_clip

    ca = ChannelAugmentation("channel", p=1.0)
    frames = [torch.rand(3, 8, 4, generator=torch.Generator().manual_seed(i)) for i in range(12)]

    def chosen(x, out):  # which input channel was replicated
        return next(c for c in range(3) if torch.equal(out[0], x[c]))

    torch.manual_seed(0)
    per_frame = {chosen(x, ca(x)) for x in frames}
    assert len(per_frame) > 1  # independent draws differ across 12 frames
    for seed in range(6):
        torch.manual_seed(seed)
        with one_draw_per_clip(T.Compose([ca])):
            per_clip = {chosen(x, ca(x)) for x in frames}
        assert len(per_clip) == 1
    assert ca._held is None  # released after the block
