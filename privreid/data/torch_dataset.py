"""PyTorch datasets over ``(path, pid, camid)`` samples: images, and tracklets of frames (video).

Images are decoded and resized once per run and kept (:data:`DECODED`); the
transforms of :func:`~privreid.data.build_transforms` then run on whole
batches as tensor operations (:class:`~privreid.data.transforms.TensorPipeline`),
with the per-image pipeline's random stream and output.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

import torch
from PIL import Image
from torch.utils.data import Dataset

from privreid.data.formats import read_image
from privreid.data.transforms import TensorPipeline, one_draw_per_clip, tensor_pipeline
from privreid.data.types import Sample
from privreid.environment import mib_from_env
from privreid.errors import ConfigError, DataError


class DecodedImages:
    """Decoded, resized images kept for the life of the process, least recently used dropped beyond ``max_bytes``.

    :meth:`get` returns a :class:`~privreid.data.transforms.TensorPipeline`'s
    ``uint8`` ``(3, H, W)`` decoding of a file (its ``Resize`` of the RGB
    image), decoding and resizing it only the first time.  Entries are keyed by
    path, modification time and size (a rewritten file is decoded again) and
    by the resize; evaluation decodes each test image once per run instead of
    once per evaluation, and training each client image once instead of once
    per epoch.  Memory is bounded: ``3 H W`` bytes per image (24 KiB at
    128x64, 96 KiB at 256x128; a Market-1501 test set, 23,100 images, is 0.55
    GiB at 128x64), at most ``max_bytes`` in all (1 GiB by default, the
    environment variable ``PRIVREID_DECODED_MB`` sets it in MiB, 0 turns the
    cache off); beyond it the least recently used images are dropped and
    decoded again when next read.  Worker processes of a ``DataLoader`` each
    hold their own.  Callers never write to the returned tensors.
    """

    def __init__(self, max_bytes: int | None = None) -> None:
        #: None: ``PRIVREID_DECODED_MB``, read when first needed (a bad value is then a command's one-line error,
        #: not a traceback while privreid is imported)
        self._max_bytes = max_bytes
        self.nbytes = 0
        self._images: OrderedDict[tuple, torch.Tensor] = OrderedDict()

    @property
    def max_bytes(self) -> int:
        if self._max_bytes is None:
            self._max_bytes = _decoded_budget()
        return self._max_bytes

    def get(self, path: str, pipeline: TensorPipeline) -> torch.Tensor:
        try:
            stat = os.stat(path)
        except OSError as exc:
            raise DataError(f"cannot read image {path}: {exc}") from exc
        key = (os.fspath(path), stat.st_mtime_ns, stat.st_size, pipeline.key)
        image = self._images.get(key)
        if image is not None:
            self._images.move_to_end(key)
            return image
        image = pipeline.decode(read_image(path))
        if image.nbytes <= self.max_bytes:
            self._images[key] = image
            self.nbytes += image.nbytes
            while self.nbytes > self.max_bytes:
                self.nbytes -= self._images.popitem(last=False)[1].nbytes
        return image

    def clear(self) -> None:
        self._images.clear()
        self.nbytes = 0


def _decoded_budget() -> int:
    return int(mib_from_env("PRIVREID_DECODED_MB", 1024) * 2**20)


#: the process's decoded images (:class:`DecodedImages`)
DECODED = DecodedImages()


class _Transformed(Dataset):
    """A dataset with a ``transform``; :meth:`_pipeline` is its tensor path, if it has one."""

    transform: Callable
    _compiled: tuple[object, TensorPipeline | None] | None = None

    def _pipeline(self) -> TensorPipeline | None:
        """``transform``'s :func:`~privreid.data.transforms.tensor_pipeline`, compiled once per transform object."""
        if self._compiled is None or self._compiled[0] is not self.transform:
            self._compiled = (self.transform, tensor_pipeline(self.transform))
        return self._compiled[1]


class ImageDataset(_Transformed):
    """Index ``i`` -> ``(transform(image), pid, camid)`` for ``samples[i]``.

    Images are read with PIL and converted to RGB, as torchreid's ``read_image``
    does.  An unreadable or corrupt file raises :class:`~privreid.errors.DataError`
    naming the path.  A :func:`~privreid.data.build_transforms` pipeline runs on
    the images :data:`DECODED` keeps, a whole ``DataLoader`` batch at once
    (``__getitems__``), with the per-image pipeline's random stream and bits;
    any other ``transform`` runs image by image on the PIL image.

    With ``augment_later``, items of a :func:`~privreid.data.build_transforms`
    pipeline are its decoded ``uint8`` images, and whoever takes the batches
    runs :meth:`augmentation` on them, on whatever device they are on (the
    training client: :func:`privreid.precision.to_device`): the random
    parameters are then drawn where the batch is consumed, from the same
    global RNG in the same order as the loader would, so the result is the
    loader path's bit for bit on the CPU, and loader worker processes
    (``--workers``) only decode and never touch the augmentation's stream.
    """

    def __init__(self, samples: Sequence[Sample], transform: Callable[[Image.Image], torch.Tensor], *,
                 augment_later: bool = False) -> None:
        self.samples = list(samples)
        self.transform = transform
        self.augment_later = augment_later

    def augmentation(self) -> TensorPipeline | None:
        """What the batches still need (``augment_later`` with a tensor pipeline), ``None`` when they are final."""
        return self._pipeline() if self.augment_later else None

    def _finish(self, images: torch.Tensor, pipeline: TensorPipeline) -> torch.Tensor:
        """Decoded images as the items hold them: as they are under ``augment_later``, else through the pipeline."""
        return images if self.augment_later else pipeline(images)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        path, pid, camid = self.samples[index]
        pipeline = self._pipeline()
        if pipeline is None:
            return self.transform(read_image(path)), pid, camid
        return self._finish(DECODED.get(path, pipeline)[None], pipeline)[0], pid, camid

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, int, int]]:
        """A batch of items, equal to ``[self[i] for i in indices]`` (``DataLoader`` calls it)."""
        pipeline = self._pipeline()
        # a subclass that changes how one item is made (corrupted evaluation) keeps its per-item path
        if pipeline is None or type(self).__getitem__ is not ImageDataset.__getitem__ or not indices:
            return [self[i] for i in indices]
        samples = [self.samples[i] for i in indices]
        decoded = [DECODED.get(path, pipeline) for path, _, _ in samples]
        images = decoded if self.augment_later else pipeline(torch.stack(decoded))  # the loader stacks them once
        return [(image, pid, camid) for image, (_, pid, camid) in zip(images, samples)]



#: frame sampling of :class:`SequenceDataset`
SEQUENCE_SAMPLING = ("evenly", "random")


def frame_indices(num_frames: int, seq_len: int, sampling: str = "evenly") -> list[int]:
    """``seq_len`` frame indices of a ``num_frames``-frame tracklet, in temporal order.

    The tracklet is cut into ``seq_len`` equal chunks (restricted random
    sampling, as the video ReID baselines HITSZ-VCM and BUPTCampus use):
    ``"evenly"`` takes the first frame of each chunk (test), ``"random"`` a
    random frame of each chunk (training; torch's global RNG).  A tracklet
    shorter than ``seq_len`` repeats frames.
    """
    if num_frames < 1 or seq_len < 1:
        raise ConfigError(f"need num_frames >= 1 and seq_len >= 1, got {num_frames} and {seq_len}")
    if sampling not in SEQUENCE_SAMPLING:
        raise ConfigError(f"sampling must be one of {', '.join(SEQUENCE_SAMPLING)}, got {sampling!r}")
    starts = [j * num_frames // seq_len for j in range(seq_len + 1)]
    if sampling == "evenly":
        return starts[:-1]
    return [int(torch.randint(a, max(b, a + 1), ())) for a, b in zip(starts[:-1], starts[1:])]


class SequenceDataset(_Transformed):
    """Index ``i`` -> ``(clip, pid, camid)`` for tracklet ``samples[i]``: ``clip`` is ``(seq_len, 3, H, W)``.

    ``samples`` are ``(key, pid, camid)`` and ``tracklets[key]`` lists the
    tracklet's frame paths (:class:`~privreid.data.types.ReIDDataset.tracklets`).
    ``seq_len`` frames are chosen by :func:`frame_indices`; ``transform`` is
    applied to each frame independently (a :func:`~privreid.data.build_transforms`
    pipeline to the clip's :data:`DECODED` frames at once, as for images).  A default-collated batch is
    ``(B, seq_len, 3, H, W)``, the input of V-DPPT (L2RW+ Eq. 9).
    """

    def __init__(self, samples: Sequence[Sample], tracklets: Mapping[str, Sequence[str]],
                 transform: Callable[[Image.Image], torch.Tensor], seq_len: int, sampling: str = "evenly") -> None:
        missing = [key for key, _, _ in samples if key not in tracklets]
        if missing:
            raise DataError(f"{len(missing)} samples have no tracklet frames, e.g. {missing[0]}")
        frame_indices(1, seq_len, sampling)  # validates seq_len and sampling
        self.samples = list(samples)
        self.tracklets = tracklets
        self.transform = transform
        self.seq_len = seq_len
        self.sampling = sampling

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        key, pid, camid = self.samples[index]
        frames = self.tracklets[key]
        chosen = frame_indices(len(frames), self.seq_len, self.sampling)
        pipeline = self._pipeline()
        with one_draw_per_clip(self.transform):  # channel augmentation: one draw per clip (V-DPPT)
            if pipeline is None:
                return torch.stack([self.transform(read_image(frames[j])) for j in chosen]), pid, camid
            return pipeline(torch.stack([DECODED.get(frames[j], pipeline) for j in chosen])), pid, camid

