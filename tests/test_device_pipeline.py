"""The input pipeline on the training device (issue 29 section 1).

Decoded images are cached as ``uint8``; a client's loader yields them as
``uint8`` batches and the client augments them on its training device with
parameters drawn from the same global RNG in the same order as the loader
path, so on the CPU the batches it trains on are the loader path's bit for
bit (the ``uint8`` -> float conversion is ``ToTensor``'s own division by 255:
0 ulp apart), and ``--workers N`` only decodes, so a run with workers equals
one without.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import tiny_config
from privreid.checkpoint import load_checkpoint
from privreid.data import ImageDataset, build_transforms
from privreid.data.catalog import federation_for_config
from privreid.data.torch_dataset import DECODED
from privreid.federated.client import client_loader
from privreid.precision import to_device
from privreid.training import train_run

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def config(tiny_synth):
    return tiny_config(tiny_synth)


@pytest.fixture(scope="module")
def client(config):
    return federation_for_config(config).clients[0]


def trained_batches(client, config, *, augment_later: bool, device: str = "cpu", seed: int = 3):
    """The float batches a client trains on over two epochs from one seed, and the global RNG state after them."""
    transform = build_transforms(config.data.height, config.data.width, train=True, random_erasing=1.0)
    torch.manual_seed(11)
    batches = []
    for epoch in range(2):
        loader = client_loader(client, config, seed + epoch,
                               dataset=ImageDataset(client.train, transform, augment_later=augment_later))
        augment = loader.dataset.augmentation()
        batches += [to_device(images, device, augment) for images, _, _ in loader]
    return batches, torch.get_rng_state()


def test_cached_images_are_uint8_and_the_client_trains_on_the_same_bits(client, config):
    DECODED.clear()
    later, later_state = trained_batches(client, config, augment_later=True)
    cached = list(DECODED._images.values())
    assert cached and all(image.dtype == torch.uint8 and image.shape == (3, 32, 16) for image in cached)
    assert DECODED.nbytes == sum(image.numel() for image in cached)  # one byte per channel value, 4x less than float
    loader, loader_state = trained_batches(client, config, augment_later=False)
    assert len(later) == len(loader) > 2
    for a, b in zip(later, loader):
        assert a.dtype == b.dtype == torch.float32 and torch.equal(a, b)
    assert torch.equal(later_state, loader_state)  # the stream goes on as before (dropout, the next client ...)


def test_the_default_client_loader_yields_uint8_batches_the_client_augments(client, config):
    loader = client_loader(client, config, 0)
    images, labels, _ = next(iter(loader))
    assert images.dtype == torch.uint8 and images.shape == (8, 3, 32, 16) and len(labels) == 8
    augmented = to_device(images, "cpu", loader.dataset.augmentation())
    assert augmented.dtype == torch.float32 and augmented.shape == images.shape
    assert to_device(images[:0].float(), "cpu", loader.dataset.augmentation()).shape[0] == 0  # DP-SGD's empty batch


def test_workers_draw_no_augmentation_so_a_run_with_workers_equals_one_without(client, config):
    """The loader with 1 worker process yields the same uint8 batches; the client draws the same parameters."""
    with_workers = config.with_values({"runtime.num_workers": 1})
    ours, our_state = trained_batches(client, with_workers, augment_later=True)
    reference, reference_state = trained_batches(client, config, augment_later=True)
    assert len(ours) == len(reference)
    assert all(torch.equal(a, b) for a, b in zip(ours, reference))
    assert torch.equal(our_state, reference_state)


@pytest.mark.slow
def test_train_with_workers_equals_train_without(tiny_synth, tmp_path):
    """``privreid train --workers 1`` trains the same model as ``--workers 0`` (same seed), bit for bit."""
    states = []
    for workers in (0, 1):
        train_run(tiny_config(tiny_synth, rounds=1, num_workers=workers), tmp_path / str(workers), progress=False)
        states.append(load_checkpoint(tmp_path / str(workers) / "ckpt.pt")["global_state"])
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


@needs_cuda
def test_cuda_augmentation_draws_the_cpu_parameters(client, config):
    """On CUDA the batch is augmented on the device with the CPU path's parameters: flips, crops and erased boxes
    land on the same pixels; the float steps (division, normalisation) may round differently, within 1e-6."""
    on_cuda, cuda_state = trained_batches(client, config, augment_later=True, device="cuda")
    on_cpu, cpu_state = trained_batches(client, config, augment_later=True)
    assert torch.equal(cuda_state, cpu_state)
    for a, b in zip(on_cuda, on_cpu):
        assert a.is_cuda and a.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=1e-6)


def test_cuda_speedups_follow_the_switch_and_leave_other_devices_alone():
    """cuDNN's autotuner is on during training on CUDA unless ``runtime.cudnn_benchmark`` is off; never elsewhere.
    (Setting the flag needs no GPU.)"""
    from privreid.config import RuntimeConfig
    from privreid.precision import cuda_speedups

    assert RuntimeConfig().cudnn_benchmark and RuntimeConfig().channels_last  # default on (for CUDA only)
    before = torch.backends.cudnn.benchmark
    for device, enabled, inside in (("cuda", True, True), ("cuda", False, before), ("cpu", True, before)):
        with cuda_speedups(device, enabled):
            assert torch.backends.cudnn.benchmark is inside
        assert torch.backends.cudnn.benchmark is before


def test_channels_last_has_no_effect_on_the_cpu(client, config):
    loader = client_loader(client, config, 0)
    images, _, _ = next(iter(loader))
    torch.manual_seed(0)
    plain = to_device(images, "cpu", loader.dataset.augmentation(), channels_last=False)
    torch.manual_seed(0)
    switched = to_device(images, "cpu", loader.dataset.augmentation(), channels_last=True)
    assert torch.equal(plain, switched) and plain.stride() == switched.stride() == plain.contiguous().stride()


@needs_cuda
def test_channels_last_switch_on_cuda(client, config):
    images, _, _ = next(iter(client_loader(client, config, 0)))
    assert to_device(images, "cuda").is_contiguous(memory_format=torch.channels_last)
    assert to_device(images, "cuda", channels_last=False).is_contiguous()
