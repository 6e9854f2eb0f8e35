"""Image transforms of the standard ReID baseline (torchreid / "Bag of Tricks" style)."""

from __future__ import annotations

from collections.abc import Sequence

import torchvision.transforms as T

from privreid.errors import ConfigError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def build_transforms(
    height: int,
    width: int,
    *,
    train: bool,
    flip: bool = True,
    pad: int | None = None,
    random_erasing: float = 0.5,
    norm_mean: Sequence[float] = IMAGENET_MEAN,
    norm_std: Sequence[float] = IMAGENET_STD,
) -> T.Compose:
    """PIL image -> normalised ``(3, height, width)`` float tensor.

    Train: ``Resize`` -> ``RandomHorizontalFlip`` (if ``flip``) -> ``Pad(pad)`` +
    ``RandomCrop`` back to ``(height, width)`` (if ``pad > 0``) -> ``ToTensor`` ->
    ``Normalize`` -> ``RandomErasing(p=random_erasing)`` (if ``> 0``; erased
    pixels are 0, i.e. the mean colour after normalisation).  Test:
    ``Resize`` -> ``ToTensor`` -> ``Normalize``; the augmentation arguments are
    ignored.

    ``pad=None`` scales BoT's 10-pixel padding at 256x128 to the image width
    (``round(10 * width / 128)``, at least 1): a fixed 10 pixels would shift a
    64-pixel-wide crop by a sixth of its width, which slows learning a lot on
    the small CPU presets.
    """
    if pad is None:
        pad = max(1, round(10 * width / 128))
    if height < 1 or width < 1:
        raise ConfigError(f"image size must be positive, got {height}x{width}")
    if pad < 0:
        raise ConfigError(f"pad must be >= 0, got {pad}")
    if not 0.0 <= random_erasing <= 1.0:
        raise ConfigError(f"random_erasing must be a probability in [0, 1], got {random_erasing}")
    size = (height, width)
    steps: list = [T.Resize(size)]
    if train:
        if flip:
            steps.append(T.RandomHorizontalFlip())
        if pad > 0:
            steps += [T.Pad(pad), T.RandomCrop(size)]
    steps += [T.ToTensor(), T.Normalize(mean=list(norm_mean), std=list(norm_std))]
    if train and random_erasing > 0:
        steps.append(T.RandomErasing(p=random_erasing))
    return T.Compose(steps)
