"""P x K identity sampler for metric-learning (triplet) losses."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

from privreid.errors import ConfigError, DataError
from privreid.data.types import Sample


class PKSampler(Sampler[int]):
    """Yield dataset indices in batches of ``p`` identities x ``k`` images each.

    As torchreid's ``RandomIdentitySampler``: per epoch each identity's images are shuffled (fewer than ``k``:
    drawn ``k`` with replacement) and cut into chunks of ``k`` (incomplete last dropped); batches take one chunk
    from each of ``p`` random identities with chunks left. Deviation: the order is a pure function of ``seed``
    and :meth:`set_epoch` (torchreid uses the global RNG), and ``len()`` is exact. Use
    ``DataLoader(batch_size=sampler.batch_size, sampler=sampler)``.
    """

    def __init__(self, samples: Sequence[Sample], p: int, k: int, seed: int = 0) -> None:
        if p < 1 or k < 1:
            raise ConfigError(f"PKSampler needs p >= 1 and k >= 1, got p={p}, k={k}")
        if seed < 0:
            raise ConfigError(f"seed must be >= 0, got {seed}")
        by_pid: dict[int, list[int]] = defaultdict(list)
        for index, (_, pid, _) in enumerate(samples):
            by_pid[pid].append(index)
        if len(by_pid) < p:
            raise DataError(f"PKSampler needs at least p={p} identities, the samples have {len(by_pid)}")
        self._by_pid = [np.asarray(by_pid[pid]) for pid in sorted(by_pid)]
        self.p, self.k, self.seed = p, k, seed
        self.epoch = 0
        self._cache: tuple[int, list[int]] | None = None

    @property
    def batch_size(self) -> int:
        return self.p * self.k

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration yields."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        return iter(self._indices())

    def __len__(self) -> int:
        return len(self._indices())

    def _indices(self) -> list[int]:
        if self._cache is None or self._cache[0] != self.epoch:
            self._cache = (self.epoch, self._draw(np.random.default_rng([self.seed, self.epoch])))
        return self._cache[1]

    def _draw(self, rng: np.random.Generator) -> list[int]:
        chunks = []
        for idxs in self._by_pid:
            if len(idxs) < self.k:
                idxs = rng.choice(idxs, size=self.k, replace=True)
            else:
                idxs = rng.permutation(idxs)
            chunks.append([idxs[i : i + self.k].tolist() for i in range(0, len(idxs) - self.k + 1, self.k)])
        available = list(range(len(chunks)))
        out: list[int] = []
        while len(available) >= self.p:
            for j in rng.choice(len(available), size=self.p, replace=False):
                out.extend(chunks[available[j]].pop())
            available = [i for i in available if chunks[i]]
        return out
