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

    :meth:`get` returns a :class:`~privreid.data.transforms.TensorPipeline`'s ``uint8`` ``(3, H, W)`` decoding
    of a file, decoding and resizing it only the first time (keyed by path, mtime, size and resize), so a test
    image is decoded once per run and a training image once instead of per epoch. ``3 H W`` bytes per image
    (Market-1501's test set at 128x64: 0.55 GiB); at most ``max_bytes`` (1 GiB; ``PRIVREID_DECODED_MB`` in MiB,
    0 turns it off). Each DataLoader worker holds its own; callers never write to the tensors.
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

    Images are read with PIL as RGB (torchreid's ``read_image``); an unreadable file raises DataError naming
    it. A :func:`~privreid.data.build_transforms` pipeline runs on :data:`DECODED` images a whole batch at once
    (``__getitems__``) with the per-image pipeline's random stream and bits; other transforms run per PIL image.
    ``augment_later``: items are the decoded ``uint8`` images and the consumer runs :meth:`augmentation` on its
    device, drawing from the same global RNG in the same order (bit for bit the loader path on the CPU), so
    loader workers (``--workers``) only decode.
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
    """``seq_len`` frame indices of a ``num_frames``-frame tracklet, in order: restricted random sampling (the
    HITSZ-VCM and BUPTCampus baselines) over ``seq_len`` equal chunks, ``"evenly"`` each chunk's first frame
    (test), ``"random"`` a random one (training; torch's global RNG). Short tracklets repeat frames."""
    if num_frames < 1 or seq_len < 1:
        raise ConfigError(f"need num_frames >= 1 and seq_len >= 1, got {num_frames} and {seq_len}")
    if sampling not in SEQUENCE_SAMPLING:
        raise ConfigError(f"sampling must be one of {', '.join(SEQUENCE_SAMPLING)}, got {sampling!r}")
    starts = [j * num_frames // seq_len for j in range(seq_len + 1)]
    if sampling == "evenly":
        return starts[:-1]
    return [int(torch.randint(a, max(b, a + 1), ())) for a, b in zip(starts[:-1], starts[1:])]


class SequenceDataset(_Transformed):
    """Index ``i`` -> ``(clip, pid, camid)`` for tracklet ``samples[i]``, ``clip`` ``(seq_len, 3, H, W)``.

    ``tracklets[key]`` lists a tracklet's frames; :func:`frame_indices` picks them and ``transform`` applies per
    frame (a pipeline on the clip's decoded frames at once). A batch is ``(B, seq_len, 3, H, W)``, V-DPPT's
    input (L2RW+ Eq. 9).
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

