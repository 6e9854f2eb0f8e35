"""PKSampler: P identities x K images per batch, deterministic per (seed, epoch)."""

from collections import Counter

import pytest
from torch.utils.data import DataLoader

from privreid.data import PKSampler
from privreid.errors import ConfigError, DataError

# pid i has i + 1 images (pid 0 and 1 have fewer than K=4 and are drawn with replacement).
SAMPLES = [(f"{pid}_{j}.jpg", pid, 0) for pid in range(8) for j in range(pid + 1)]


def batches(sampler):
    indices = list(sampler)
    size = sampler.batch_size
    assert len(indices) == len(sampler) and len(indices) % size == 0
    return [indices[i : i + size] for i in range(0, len(indices), size)]


@pytest.mark.parametrize("p, k", [(2, 4), (3, 2), (8, 1)])
def test_each_batch_is_p_identities_times_k(p, k):
    sampler = PKSampler(SAMPLES, p=p, k=k, seed=1)
    assert len(sampler) > 0
    for batch in batches(sampler):
        per_pid = Counter(SAMPLES[i][1] for i in batch)
        assert len(per_pid) == p and set(per_pid.values()) == {k}
        # Identities with >= K images never repeat an image within their chunk.
        for pid in per_pid:
            picked = [i for i in batch if SAMPLES[i][1] == pid]
            if pid + 1 >= k:
                assert len(set(picked)) == k


def test_no_image_used_twice_per_epoch_when_identities_are_large():
    samples = [(f"{pid}_{j}", pid, 0) for pid in range(6) for j in range(8)]
    indices = list(PKSampler(samples, p=3, k=4))
    assert len(indices) == len(set(indices)) == 48  # 6 ids x 2 chunks, always pairable


def test_deterministic_and_epochs_differ():
    a, b = PKSampler(SAMPLES, 2, 4, seed=7), PKSampler(SAMPLES, 2, 4, seed=7)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    b.set_epoch(1)
    assert list(a) == list(b)
    a.set_epoch(0)
    assert list(a) == first
    assert list(PKSampler(SAMPLES, 2, 4, seed=8)) != first


def test_dataloader_batches():
    sampler = PKSampler(SAMPLES, p=2, k=3)
    loader = DataLoader(list(range(len(SAMPLES))), batch_size=sampler.batch_size, sampler=sampler)
    sizes = [len(batch) for batch in loader]
    assert sizes and set(sizes) == {6} and sum(sizes) == len(sampler)


@pytest.mark.parametrize("p, k", [(0, 4), (2, 0), (-1, -1)])
def test_invalid_p_or_k(p, k):
    with pytest.raises(ConfigError, match="p >= 1 and k >= 1"):
        PKSampler(SAMPLES, p, k)


def test_too_few_identities():
    with pytest.raises(DataError, match="at least p=9 identities, the samples have 8"):
        PKSampler(SAMPLES, 9, 2)
    with pytest.raises(DataError, match="have 0"):
        PKSampler([], 1, 1)


def test_negative_seed():
    with pytest.raises(ConfigError, match="seed"):
        PKSampler(SAMPLES, 2, 2, seed=-3)
