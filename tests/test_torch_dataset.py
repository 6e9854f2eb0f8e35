"""ImageDataset: (tensor, pid, camid) items, RGB conversion, and DataError on unreadable files."""

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from privreid.data import ImageDataset, build_transforms
from privreid.errors import DataError


@pytest.fixture
def samples(tmp_path):
    rgb = tmp_path / "0001_c1s1_000001_01.jpg"
    Image.new("RGB", (8, 16), (10, 20, 30)).save(rgb)
    grey = tmp_path / "0002_c2_1.png"
    Image.new("L", (8, 16), 128).save(grey)
    return [(str(rgb), 0, 0), (str(grey), 1, 1)]


def test_items(samples):
    ds = ImageDataset(samples, build_transforms(16, 8, train=False))
    assert len(ds) == 2
    image, pid, camid = ds[1]
    assert image.shape == (3, 16, 8) and (pid, camid) == (1, 1)  # greyscale converted to RGB
    images, pids, camids = next(iter(DataLoader(ds, batch_size=2)))
    assert images.shape == (2, 3, 16, 8)
    assert pids.tolist() == [0, 1] and camids.tolist() == [0, 1]


def test_transform_receives_rgb_pil_image(samples):
    seen = []
    ds = ImageDataset(samples, lambda img: seen.append((img.mode, img.size)) or torch.zeros(1))
    ds[0], ds[1]
    assert seen == [("RGB", (8, 16)), ("RGB", (8, 16))]


@pytest.mark.parametrize("content", [b"", b"\xff\xd8\xff\xe0 not a jpeg", None])
def test_unreadable_file_raises_data_error(tmp_path, samples, content):
    bad = tmp_path / "0003_c1s1_000001_01.jpg"
    if content is None:  # truncated JPEG: headers intact, pixels missing
        good = open(samples[0][0], "rb").read()
        bad.write_bytes(good[:-3])
    else:
        bad.write_bytes(content)
    ds = ImageDataset([(str(bad), 0, 0)], build_transforms(16, 8, train=False))
    with pytest.raises(DataError, match="cannot read image .*0003_c1s1_000001_01.jpg"):
        ds[0]


def test_missing_file_raises_data_error(tmp_path):
    ds = ImageDataset([(str(tmp_path / "gone.jpg"), 0, 0)], build_transforms(16, 8, train=False))
    with pytest.raises(DataError, match="gone.jpg"):
        ds[0]
