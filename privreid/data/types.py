"""Plain data records shared by loaders, partitions and the training code.

A sample is a ``(path, pid, camid)`` tuple, exactly as in torchreid:

* ``pid``: identity label.  In ``train`` splits, pids are relabelled to
  ``0..num_train_pids-1``; in ``query`` / ``gallery`` they keep the value parsed
  from the file name (``0`` = distractor).  Junk images (pid ``-1``) are dropped
  at load time.
* ``camid``: 0-based camera index parsed from the file name (``c1`` -> 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

Sample = tuple[str, int, int]


def relabel(samples: Iterable[Sample]) -> list[Sample]:
    """Return ``samples`` with pids mapped to ``0..n-1`` in sorted order of the original pid.

    This is torchreid's ``pid2label`` relabelling of training splits; paths,
    camids and sample order are unchanged.
    """
    samples = list(samples)
    pid2label = {pid: label for label, pid in enumerate(sorted({pid for _, pid, _ in samples}))}
    return [(path, pid2label[pid], camid) for path, pid, camid in samples]


@dataclass
class ReIDDataset:
    """One ReID dataset (domain): train / query / gallery lists of samples."""

    name: str
    train: list[Sample]
    query: list[Sample]
    gallery: list[Sample]
    root: str = ""

    @property
    def num_train_pids(self) -> int:
        return len({pid for _, pid, _ in self.train})

    @property
    def num_train_cams(self) -> int:
        return len({cam for _, _, cam in self.train})


@dataclass
class ClientData:
    """What one federated client holds.

    ``train`` pids are relabelled ``0..num_classes-1`` *within the client* (its
    classifier head is local, so label spaces are independent).  ``query`` and
    ``gallery`` form the client's seen-domain test split; several clients of
    the same domain may share it (by-camera / by-identity partitions).
    """

    name: str
    domain: str
    train: list[Sample]
    query: list[Sample] = field(default_factory=list)
    gallery: list[Sample] = field(default_factory=list)
    #: ``source_pids[i]`` is the domain-level train pid of client label ``i``
    #: (set by partitions that relabel, so identities can be re-pooled).
    source_pids: list[int] | None = None

    @property
    def num_classes(self) -> int:
        return len({pid for _, pid, _ in self.train})

    @property
    def num_samples(self) -> int:
        return len(self.train)


@dataclass
class TestSet:
    """A query/gallery pair used for evaluation only (e.g. an unseen domain)."""

    name: str
    query: list[Sample]
    gallery: list[Sample]


@dataclass
class Federation:
    """The output of a partition protocol.

    ``clients`` train; ``seen`` holds one test set per training domain (shared
    by that domain's clients); ``unseen`` holds held-out domains, never trained
    on (leave-one-domain-out / EI-style generalisation).
    """

    protocol: str
    clients: list[ClientData]
    seen: list[TestSet]
    unseen: list[TestSet]
