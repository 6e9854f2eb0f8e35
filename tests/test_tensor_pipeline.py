"""The batched tensor path of the transforms and the decoded-image cache: the per-image PIL pipeline's bits."""

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image
from torch.utils.data import DataLoader

from privreid.data import IMAGENET_MEAN, IMAGENET_STD, ImageDataset, SequenceDataset, build_transforms
from privreid.data import torch_dataset
from privreid.data.formats import read_image
from privreid.data.torch_dataset import DecodedImages
from privreid.data.transforms import ChannelAugmentation, one_draw_per_clip, tensor_pipeline
from privreid.errors import ConfigError, DataError
from privreid.evaluation.model_eval import dataset_features

PIPELINES = {
    "train": dict(train=True),
    "train-erase-always": dict(train=True, random_erasing=1.0),
    "train-no-pad": dict(train=True, pad=0),
    "train-big-pad": dict(train=True, pad=6, flip=False),
    "channel": dict(train=True, channel_aug="channel"),
    "gray": dict(train=True, channel_aug="gray", channel_aug_p=0.7),
    "test": dict(train=False),
    "unnormalised": dict(train=False, norm_mean=(0.0, 0.0, 0.0), norm_std=(1.0, 1.0, 1.0)),
}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """24 JPEG/PNG files of different sizes and a greyscale one."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(24):
        pixels = rng.integers(0, 256, (30 + 3 * (i % 5), 14 + i % 4, 3), dtype=np.uint8)
        path = root / f"{i:04d}_c{i % 3 + 1}s1_{i:06d}_00.{'png' if i % 4 else 'jpg'}"
        (Image.fromarray(pixels).convert("L") if i == 5 else Image.fromarray(pixels)).save(path)
        paths.append(str(path))
    return paths


class PerImage(ImageDataset):
    """The per-image PIL path (what ImageDataset did before the tensor path), the reference."""

    def __getitem__(self, index):
        path, pid, camid = self.samples[index]
        return self.transform(read_image(path)), pid, camid


def samples(paths):
    return [(p, i % 6, i % 3) for i, p in enumerate(paths)]


@pytest.mark.parametrize("name", PIPELINES)
def test_batches_equal_the_per_image_pipeline_bit_for_bit(images, name):
    """Two shuffled epochs of DataLoader batches, and the random state after them, are the PIL pipeline's."""
    transform = build_transforms(32, 16, **PIPELINES[name])
    assert tensor_pipeline(transform) is not None

    def epochs(dataset):
        torch.manual_seed(7)
        loader = DataLoader(dataset, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(1))
        batches = [batch for _ in range(2) for batch in loader]
        return batches, torch.get_rng_state()

    new, new_state = epochs(ImageDataset(samples(images), transform))
    old, old_state = epochs(PerImage(samples(images), transform))
    assert len(new) == len(old) == 10
    for (a, ap, ac), (b, bp, bc) in zip(new, old):
        assert a.dtype == b.dtype == torch.float32 and torch.equal(a, b)
        assert torch.equal(ap, bp) and torch.equal(ac, bc)
    assert torch.equal(new_state, old_state)  # the stream goes on as before (dropout, the next round ...)


def test_single_items_equal_the_per_image_pipeline(images):
    transform = build_transforms(32, 16, train=True, random_erasing=1.0, channel_aug="channel")
    dataset, reference = ImageDataset(samples(images), transform), PerImage(samples(images), transform)
    torch.manual_seed(3)
    new = [dataset[i][0] for i in range(len(images))]
    torch.manual_seed(3)
    old = [reference[i][0] for i in range(len(images))]
    assert all(torch.equal(a, b) for a, b in zip(new, old))


def test_random_erasing_noise_and_unsupported_steps(images):
    """Noise erasing runs on the tensor path; a step it does not know keeps the PIL path, unchanged."""
    noise = T.Compose([T.Resize((32, 16)), T.ToTensor(), T.RandomErasing(p=1.0, value="random")])
    jitter = T.Compose([T.Resize((32, 16)), T.ColorJitter(0.3), T.ToTensor()])
    assert tensor_pipeline(noise) is not None
    assert tensor_pipeline(jitter) is None
    assert tensor_pipeline(T.Compose([T.Resize(32), T.ToTensor()])) is None  # shorter side: varying shapes
    assert tensor_pipeline(T.Compose([T.Resize((32, 16))])) is None  # no ToTensor: not a tensor pipeline
    assert tensor_pipeline(lambda image: image) is None
    for transform in (noise, jitter):
        torch.manual_seed(0)
        new = ImageDataset(samples(images), transform).__getitems__([3, 1, 4])
        torch.manual_seed(0)
        old = [PerImage(samples(images), transform)[i] for i in (3, 1, 4)]
        assert all(torch.equal(a[0], b[0]) for a, b in zip(new, old))


def test_clip_frames_share_one_channel_draw_and_equal_the_per_frame_pipeline(images):
    """V-DPPT clips: the tensor path runs the clip's frames at once under one_draw_per_clip."""
    transform = build_transforms(32, 16, train=True, channel_aug="channel", channel_aug_p=1.0, random_erasing=0.0)
    tracklets = {"a": images[:7], "b": images[7:16]}
    dataset = SequenceDataset([("a", 0, 0), ("b", 1, 1)], tracklets, transform, seq_len=4, sampling="random")
    torch.manual_seed(5)
    new = [dataset[i][0] for i in range(2)]
    torch.manual_seed(5)
    old = []
    for key in ("a", "b"):
        chosen = torch_dataset.frame_indices(len(tracklets[key]), 4, "random")
        with one_draw_per_clip(transform):
            old.append(torch.stack([transform(read_image(tracklets[key][j])) for j in chosen]))
    assert all(torch.equal(a, b) for a, b in zip(new, old))
    mean, std = (torch.tensor(v).view(3, 1, 1) for v in (IMAGENET_MEAN, IMAGENET_STD))
    for clip in new:  # p = 1: every frame is one channel replicated
        pixels = clip * std + mean
        assert all(torch.allclose(pixels[:, 0], pixels[:, c], atol=1e-5) for c in (1, 2))


def test_test_features_are_unchanged(images):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    transform = build_transforms(32, 16, train=False)
    new = dataset_features(model, ImageDataset(samples(images), transform), batch_size=7)
    old = dataset_features(model, PerImage(samples(images), transform), batch_size=7)
    assert torch.equal(new[0], old[0]) and np.array_equal(new[1], old[1]) and np.array_equal(new[2], old[2])


def test_each_image_is_decoded_once(images, monkeypatch):
    reads = []

    def counting(path):
        reads.append(path)
        return read_image(path)

    monkeypatch.setattr(torch_dataset, "read_image", counting)
    monkeypatch.setattr(torch_dataset, "DECODED", DecodedImages(2**30))
    dataset = ImageDataset(samples(images), build_transforms(32, 16, train=True))
    loader = DataLoader(dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        list(loader)
    evaluation = ImageDataset(samples(images), build_transforms(32, 16, train=False))
    list(DataLoader(evaluation, batch_size=8))
    assert sorted(reads) == sorted(images)  # three epochs and an evaluation: one decoding per image
    list(DataLoader(ImageDataset(samples(images), build_transforms(64, 32, train=False)), batch_size=8))
    assert len(reads) == 2 * len(images)  # another size is another decoding


def test_cache_is_bounded_least_recently_used_and_never_written(images, tmp_path, monkeypatch):
    pipeline = tensor_pipeline(build_transforms(32, 16, train=True, random_erasing=1.0))
    one = 3 * 32 * 16
    cache = DecodedImages(max_bytes=3 * one)
    kept = [cache.get(p, pipeline).clone() for p in images[:3]]
    assert cache.nbytes == 3 * one
    cache.get(images[0], pipeline)  # most recent now
    cache.get(images[3], pipeline)  # evicts images[1], the least recently used
    assert cache.nbytes == 3 * one and len(cache._images) == 3
    assert {k[0] for k in cache._images} == {images[0], images[2], images[3]}
    torch.manual_seed(0)
    pipeline(torch.stack([cache.get(p, pipeline) for p in images[:3]]))
    pipeline(cache.get(images[0], pipeline)[None])
    assert torch.equal(cache.get(images[0], pipeline), kept[0])  # the pipeline never writes its input
    assert DecodedImages(max_bytes=0).get(images[0], pipeline).shape == (3, 32, 16)  # off: decode each time
    # a rewritten file is decoded again
    path = tmp_path / "x.png"
    Image.new("RGB", (16, 32), (10, 20, 30)).save(path)
    first = cache.get(str(path), pipeline).clone()
    Image.new("RGB", (16, 32), (200, 20, 30)).save(path)
    second = cache.get(str(path), pipeline)
    assert first[0, 0, 0] == 10 and second[0, 0, 0] == 200


def test_cache_errors(tmp_path, monkeypatch):
    pipeline = tensor_pipeline(build_transforms(32, 16, train=False))
    with pytest.raises(DataError, match="missing.jpg"):
        DecodedImages(2**20).get(str(tmp_path / "missing.jpg"), pipeline)
    (tmp_path / "bad.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match="bad.jpg"):
        DecodedImages(2**20).get(str(tmp_path / "bad.jpg"), pipeline)
    for raw in ("lots", "-1", "inf"):  # inf overflowed int() in the byte count before
        monkeypatch.setenv("PRIVREID_DECODED_MB", raw)
        with pytest.raises(ConfigError, match="PRIVREID_DECODED_MB"):
            torch_dataset._decoded_budget()
    monkeypatch.setenv("PRIVREID_DECODED_MB", "2")
    assert torch_dataset._decoded_budget() == 2 * 2**20


def test_channel_augmentation_draw_and_apply_compose_to_a_call():
    image = torch.rand(3, 4, 2)
    aug = ChannelAugmentation("channel", p=1.0)
    torch.manual_seed(0)
    called = aug(image)
    torch.manual_seed(0)
    assert torch.equal(ChannelAugmentation.apply(image, aug.draw()), called)
