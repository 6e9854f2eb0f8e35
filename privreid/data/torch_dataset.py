"""A ``torch.utils.data.Dataset`` over ``(path, pid, camid)`` samples."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from PIL import Image
from torch.utils.data import Dataset

from privreid.data.formats import read_image
from privreid.data.types import Sample


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
