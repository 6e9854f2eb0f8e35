"""Image transforms of the standard ReID baseline (torchreid / "Bag of Tricks" style).

Also channel augmentation for visible-infrared ReID (:class:`ChannelAugmentation`),
and :class:`TensorPipeline`, which runs these transforms on a batch of decoded
images with the random stream and the output of the per-image PIL pipeline.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torchvision.transforms as T
import torchvision.transforms.functional as TF

from privreid.errors import ConfigError
from privreid.model_names import INTERPOLATIONS

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

    def draw(self) -> str | int | None:
        """The decision of one call: the held one inside :func:`one_draw_per_clip`, else :meth:`decide`."""
        return self._held if self._held is not None else self.decide()

    @staticmethod
    def apply(image: torch.Tensor, decision: str | int | None) -> torch.Tensor:
        """``image`` under ``decision`` (one of :meth:`draw`'s results)."""
        if image.dim() < 3 or image.shape[-3] != 3:
            raise ValueError(f"channel augmentation needs (..., 3, H, W) images, got shape {tuple(image.shape)}")
        if decision is None or decision == "none":
            return image
        if decision == "gray":
            return TF.rgb_to_grayscale(image, num_output_channels=3)
        return image.narrow(-3, int(decision), 1).expand_as(image).clone()

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return self.apply(image, self.draw())

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
    interpolation: str = "bilinear",
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
    ignored.  ``interpolation`` (:data:`INTERPOLATIONS`) is the resize's.

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
    if interpolation not in INTERPOLATIONS:
        raise ConfigError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}")
    size = (height, width)
    steps: list = [T.Resize(size, interpolation=T.InterpolationMode(interpolation))]
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


class TensorPipeline:
    """A :func:`build_transforms` pipeline run on a batch of decoded images: same random stream, same bits.

    The pipeline is split at its deterministic first step: :meth:`decode`
    resizes a PIL image with the pipeline's own ``Resize`` into a ``uint8``
    ``(3, H, W)`` tensor, which callers may keep (decoded once per run,
    :class:`privreid.data.torch_dataset.DecodedImages`); :meth:`__call__` then
    runs the remaining steps on a ``(B, 3, H, W)`` batch of them as tensor
    operations.  Random parameters are drawn image after image, each image's
    steps in pipeline order, with exactly the global-RNG calls of the
    torchvision / :class:`ChannelAugmentation` steps themselves (their own
    ``get_params``), so a batch equals, bit for bit, the per-image pipeline run
    on its images in order from the same random state; flip, pad and crop act
    on the ``uint8`` pixels as on PIL's, and conversion, channel augmentation,
    normalisation and erasing are the same element-wise float operations.
    Augmentation therefore stays seeded by the global RNG (per client and
    round) and resumable.  The input batch is never written to.

    The batch may be on any device: the parameters are drawn on the CPU (the
    global RNG, as above) and the steps run where the batch is, so a client
    can move a ``uint8`` batch to its training device (4x fewer bytes than
    float) and augment it there with the parameters the CPU path would use
    (:class:`privreid.data.torch_dataset.ImageDataset`'s ``augment_later``).
    """

    def __init__(self, resize: T.Resize, steps: list[tuple[str, Any, tuple[int, int]]]) -> None:
        self.resize = resize
        #: ``(kind, step, (height, width) of its input)``
        self.steps = steps

    @functools.cached_property
    def key(self) -> tuple:
        """What :meth:`decode`'s output depends on besides the image (a cache key; computed once: the loader
        asks for it for every image of every batch)."""
        r = self.resize
        return tuple(r.size), str(r.interpolation), r.max_size, r.antialias

    def decode(self, image) -> torch.Tensor:
        """The pipeline's ``Resize`` of a PIL image, as a ``uint8`` ``(3, H, W)`` tensor."""
        return TF.pil_to_tensor(self.resize(image))

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, 3, H, W)`` ``uint8`` images (:meth:`decode`'s) -> the pipeline's ``(B, 3, h, w)`` float images."""
        if images.dim() != 4 or images.dtype != torch.uint8:
            raise ValueError(f"TensorPipeline needs a (B, 3, H, W) uint8 batch, got {images.dtype} "
                             f"{tuple(images.shape)}")
        plans = [[self._draw(kind, step, size) for kind, step, size in self.steps] for _ in range(len(images))]
        x = images
        for n, (kind, step, _) in enumerate(self.steps):
            draws = [plan[n] for plan in plans]
            if kind == "flip":
                # built on the host, copied without blocking: on CUDA the host does not wait for the device
                flipped = torch.tensor(draws, dtype=torch.bool).to(x.device, non_blocking=True).view(-1, 1, 1, 1)
                x = torch.where(flipped, x.flip(-1), x)
            elif kind == "pad":
                x = torch.nn.functional.pad(x, (step.padding,) * 4, value=0)
            elif kind == "crop":
                th, tw = step.size
                x = torch.stack([image[:, i:i + th, j:j + tw] for image, (i, j) in zip(x, draws)])
            elif kind == "to_tensor":
                x = x.to(torch.get_default_dtype()).div(255)  # torchvision's ToTensor of 8-bit pixels
            elif kind == "channel":
                for b, decision in enumerate(draws):
                    if decision is not None and decision != "none":
                        x[b] = ChannelAugmentation.apply(x[b], decision)
            elif kind == "normalize":
                x = TF.normalize(x, step.mean, step.std)
            else:  # erase
                for b, params in enumerate(draws):
                    if params is not None:
                        i, j, h, w, v = params
                        x[b, :, i:i + h, j:j + w] = v.to(x.device, non_blocking=True)
        return x

    @staticmethod
    def _draw(kind: str, step, size: tuple[int, int]):
        """One image's random parameters of ``step``: the global-RNG calls of the step's own forward."""
        if kind == "flip":
            return bool(torch.rand(1) < step.p)
        if kind == "crop":
            i, j, _, _ = T.RandomCrop.get_params(_shaped(size), step.size)
            return i, j
        if kind == "channel":
            return step.draw()
        if kind == "erase":
            if not torch.rand(1) < step.p:
                return None
            shaped = _shaped(size)
            i, j, h, w, v = T.RandomErasing.get_params(shaped, scale=step.scale, ratio=step.ratio,
                                                       value=_erasing_value(step.value))
            return None if v is shaped else (i, j, h, w, v)  # no box fits: the image is left as it is
        return None


def _shaped(size: tuple[int, int]) -> torch.Tensor:
    """A memory-free ``(3, *size)`` tensor: the ``get_params`` functions read only the shape."""
    return torch.empty(()).expand(3, *size)


def _erasing_value(value) -> list[float] | None:
    """``RandomErasing.forward``'s cast of its ``value`` (``"random"``: ``None``, noise)."""
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, str):
        return None
    return [float(v) for v in value]


def tensor_pipeline(transform) -> TensorPipeline | None:
    """The :class:`TensorPipeline` of ``transform``, or ``None`` when it has a step the tensor path does not run.

    Runs a ``Compose`` of a fixed-size ``Resize``, then any of
    ``RandomHorizontalFlip``, ``Pad`` (one int, black) and ``RandomCrop``
    (no padding of its own), ``ToTensor``, then any of
    :class:`ChannelAugmentation`, ``Normalize`` and ``RandomErasing`` (3-value
    or scalar ``value``): every pipeline :func:`build_transforms` returns.
    Other transforms keep the per-image path.
    """
    steps = getattr(transform, "transforms", None)
    if not isinstance(transform, T.Compose) or not steps or type(steps[0]) is not T.Resize:
        return None
    resize = steps[0]
    if not (isinstance(resize.size, (tuple, list)) and len(resize.size) == 2):
        return None
    size = tuple(int(v) for v in resize.size)
    compiled: list[tuple[str, Any, tuple[int, int]]] = []
    tensors = False
    for step in steps[1:]:
        kind = _kind(step, tensors)
        if kind is None:
            return None
        compiled.append((kind, step, size))
        if kind == "to_tensor":
            tensors = True
        elif kind == "pad":
            size = (size[0] + 2 * step.padding, size[1] + 2 * step.padding)
        elif kind == "crop":
            if size[0] < step.size[0] or size[1] < step.size[1]:
                return None
            size = tuple(step.size)
    return TensorPipeline(resize, compiled) if tensors else None


def _kind(step, tensors: bool) -> str | None:
    """The :class:`TensorPipeline` step kind of a transform, ``None`` if it is not one the tensor path runs."""
    if not tensors:
        if type(step) is T.RandomHorizontalFlip:
            return "flip"
        if type(step) is T.Pad and type(step.padding) is int and step.fill == 0 and step.padding_mode == "constant":
            return "pad"
        if type(step) is T.RandomCrop and step.padding is None and not step.pad_if_needed:
            return "crop"
        return "to_tensor" if type(step) is T.ToTensor else None
    if type(step) is ChannelAugmentation:
        return "channel"
    if type(step) is T.Normalize:
        return "normalize"
    if type(step) is T.RandomErasing and (isinstance(step.value, (int, float, str))
                                          or len(step.value) in (1, 3)):
        return "erase"
    return None
