"""PyTorch datasets over ``(path, pid, camid)`` samples: images, and tracklets of frames (video)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from PIL import Image
from torch.utils.data import Dataset

from privreid.data.formats import read_image
from privreid.data.transforms import one_draw_per_clip
from privreid.data.types import Sample
from privreid.errors import ConfigError, DataError


class ImageDataset(Dataset):
    """Index ``i`` -> ``(transform(image), pid, camid)`` for ``samples[i]``.

    Images are read with PIL and converted to RGB, as torchreid's ``read_image``
    does.  An unreadable or corrupt file raises :class:`~privreid.errors.DataError`
    naming the path.
    """

    def __init__(self, samples: Sequence[Sample], transform: Callable[[Image.Image], torch.Tensor]) -> None:
        self.samples = list(samples)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        path, pid, camid = self.samples[index]
        return self.transform(read_image(path)), pid, camid


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


class SequenceDataset(Dataset):
    """Index ``i`` -> ``(clip, pid, camid)`` for tracklet ``samples[i]``: ``clip`` is ``(seq_len, 3, H, W)``.

    ``samples`` are ``(key, pid, camid)`` and ``tracklets[key]`` lists the
    tracklet's frame paths (:class:`~privreid.data.types.ReIDDataset.tracklets`).
    ``seq_len`` frames are chosen by :func:`frame_indices`; ``transform`` is
    applied to each frame independently.  A default-collated batch is
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
        with one_draw_per_clip(self.transform):  # channel augmentation: one draw per clip (V-DPPT)
            return torch.stack([self.transform(read_image(frames[j])) for j in chosen]), pid, camid
