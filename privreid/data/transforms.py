"""Image transforms of the standard ReID baseline (torchreid / "Bag of Tricks" style).

Also channel augmentation for visible-infrared ReID (:class:`ChannelAugmentation`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torchvision.transforms as T
import torchvision.transforms.functional as TF

from privreid.errors import ConfigError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: ``ChannelAugmentation`` modes: off, one random colour channel replicated, grayscale
CHANNEL_AUG_MODES = ("none", "channel", "gray")


@contextmanager
def one_draw_per_clip(transform) -> Iterator[None]:
    """Within the block, every :class:`ChannelAugmentation` step of ``transform`` applies one draw to every frame.

    L2RW+'s V-DPPT augments a clip, not its frames independently: the channel
    (or grayscale) is drawn once per clip (one torch draw per step, as for an
    image) and held for all its frames.  Other random steps (flip, crop,
    erasing) keep their per-frame draws.
    """
    steps = [t for t in getattr(transform, "transforms", [transform]) if isinstance(t, ChannelAugmentation)]
    for step in steps:
        decision = step.decide()
        step._held = "none" if decision is None else decision
    try:
        yield
    finally:
        for step in steps:
            step._held = None


class ChannelAugmentation:
    """Channel augmentation (CA) for visible-infrared ReID.

    Ye et al., "Channel Augmented Joint Learning for Visible-Infrared
    Recognition", ICCV 2021, as used by L2RW+ (paper 003, Sec. III-B): with
    probability ``p`` one of the R, G, B channels, drawn uniformly, replaces
    the other two, so a colour image looks like a single-channel infrared one
    while keeping one channel's texture.  ``mode="gray"`` is the ablation of
    L2RW+'s Table VII (B+gray): with probability ``p`` the image becomes its
    luma ``0.2989 R + 0.587 G + 0.114 B`` (``torchvision``'s
    ``rgb_to_grayscale``) on all three channels.  ``mode="none"`` returns the
    input.

    Works on ``(..., 3, H, W)`` float tensors in ``[0, 1]`` with one draw per
    call (so all frames of a clip passed at once get the same channel).  Draws
    use the torch RNG, which privreid seeds per client and round.

    Choices: ``p = 0.5`` is the reference code's.  In ``build_transforms`` CA
    runs on the ``[0, 1]`` image *before* ImageNet normalisation, so an
    augmented image enters the model exactly as a stored infrared image
    (one channel replicated) would; the reference code applies its channel
    exchange after normalisation, and also draws grayscale as a fourth
    outcome, which the paper's text (R, G or B) does not mention.
    """

    def __init__(self, mode: str = "channel", p: float = 0.5) -> None:
        if mode not in CHANNEL_AUG_MODES:
            raise ConfigError(f"unknown channel augmentation {mode!r}; choose one of {', '.join(CHANNEL_AUG_MODES)}")
        if not 0.0 <= p <= 1.0:
            raise ConfigError(f"channel augmentation probability must be in [0, 1], got {p}")
        self.mode, self.p = mode, float(p)

    #: a decision held for every call while :func:`one_draw_per_clip` is active
    _held: object = None

    def decide(self) -> str | int | None:
        """One draw: ``None`` (leave the image), ``"gray"``, or the channel index that replaces the others."""
        if self.mode == "none" or float(torch.rand(())) >= self.p:
            return None
        return "gray" if self.mode == "gray" else int(torch.randint(3, ()))

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if image.dim() < 3 or image.shape[-3] != 3:
            raise ValueError(f"channel augmentation needs (..., 3, H, W) images, got shape {tuple(image.shape)}")
        decision = self._held if self._held is not None else self.decide()
        if decision is None or decision == "none":
            return image
        if decision == "gray":
            return TF.rgb_to_grayscale(image, num_output_channels=3)
        return image.narrow(-3, int(decision), 1).expand_as(image).clone()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mode={self.mode!r}, p={self.p})"


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
    channel_aug: str = "none",
    channel_aug_p: float = 0.5,
) -> T.Compose:
    """PIL image -> normalised ``(3, height, width)`` float tensor.

    Train: ``Resize`` -> ``RandomHorizontalFlip`` (if ``flip``) -> ``Pad(pad)`` +
    ``RandomCrop`` back to ``(height, width)`` (if ``pad > 0``) -> ``ToTensor`` ->
    ``Normalize`` -> ``RandomErasing(p=random_erasing)`` (if ``> 0``; erased
    pixels are 0, i.e. the mean colour after normalisation).  With
    ``channel_aug`` other than ``"none"`` (train only), a
    :class:`ChannelAugmentation` of that mode with probability
    ``channel_aug_p`` runs between ``ToTensor`` and ``Normalize``.  Test:
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
    steps.append(T.ToTensor())
    augment = ChannelAugmentation(channel_aug, channel_aug_p)  # validates the arguments
    if train and channel_aug != "none":
        steps.append(augment)
    steps.append(T.Normalize(mean=list(norm_mean), std=list(norm_std)))
    if train and random_erasing > 0:
        steps.append(T.RandomErasing(p=random_erasing))
    return T.Compose(steps)
