"""Plain data records shared by loaders, partitions and the training code.

A sample is a ``(path, pid, camid)`` tuple, as in torchreid: ``train`` pids are relabelled ``0..n-1``;
``query`` / ``gallery`` pids keep the file name's value (``0`` = distractor); junk (``-1``) is dropped;
``camid`` is 0-based (``c1`` -> 0). Visible-infrared and video datasets add mappings keyed by path
(:mod:`privreid.data.formats.vi`): ``modality[path]`` (:data:`VISIBLE` / :data:`INFRARED`), ``tracklets[path]``
(a tracklet's frames in order) and ``vi_protocol`` (:class:`VIProtocol`). A VI dataset's ``query`` /
``gallery`` are the infrared-to-visible split L2RW+ reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

Sample = tuple[str, int, int]

#: Modality names of visible-infrared datasets (values of the ``modality`` mappings).
VISIBLE = "visible"
INFRARED = "infrared"
MODALITIES = (VISIBLE, INFRARED)


@dataclass(frozen=True)
class VIProtocol:
    """How a visible-infrared test split is ranked, as each benchmark's released evaluation code does.

    ``gallery_trials``: ``1`` the whole gallery; ``n > 1`` that many single-shot galleries (one image or tracklet
    per identity and camera, drawn), metrics averaged (SYSU-MM01, LLCM: 10). ``cmc_by_identity``: CMC counts
    distinct gallery identities ranked before the first match (SYSU-MM01 / LLCM's "new_cmc"); mAP and mINP rank
    images. ``colocated_cameras``: 0-based camera pairs in one place; a query from one ignores the other's whole
    gallery (SYSU-MM01: IR camera 3, visible camera 2). ``seq_len``: video frames averaged into a tracklet's
    feature (L2RW+ Eq. 9, Sec. IV-B: 6 for HITSZ-VCM, 10 for BUPTCampus). Every protocol also drops the query's
    identity seen by its camera (Market-1501's rule; matters for cameras with both modalities).
    """

    gallery_trials: int = 1
    cmc_by_identity: bool = False
    colocated_cameras: tuple[tuple[int, int], ...] = ()
    seq_len: int = 6


def relabel(samples: Iterable[Sample]) -> list[Sample]:
    """``samples`` with pids mapped to ``0..n-1`` in sorted order (torchreid's ``pid2label``); paths, camids and
    order unchanged."""
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
    #: VI datasets: ``path -> VISIBLE | INFRARED`` for every sample (None: one modality)
    modality: dict[str, str] | None = None
    #: VI datasets: how the query/gallery split is ranked
    vi_protocol: VIProtocol = field(default_factory=VIProtocol)
    #: video datasets: ``path -> frame paths`` of every tracklet sample (None: images)
    tracklets: dict[str, list[str]] | None = None

    @property
    def num_train_pids(self) -> int:
        return len({pid for _, pid, _ in self.train})

    @property
    def num_train_cams(self) -> int:
        return len({cam for _, _, cam in self.train})


@dataclass
class ClientData:
    """What one federated client holds: ``train`` relabelled ``0..num_classes-1`` within the client (its head is
    local), and its seen-domain ``query`` / ``gallery``, which clients of one domain may share."""

    name: str
    domain: str
    train: list[Sample]
    query: list[Sample] = field(default_factory=list)
    gallery: list[Sample] = field(default_factory=list)
    #: ``source_pids[i]`` is the domain-level train pid of client label ``i``
    #: (set by partitions that relabel, so identities can be re-pooled).
    source_pids: list[int] | None = None
    #: video clients: ``path -> frame paths`` of every tracklet (None: images)
    tracklets: dict[str, list[str]] | None = None

    @property
    def num_classes(self) -> int:
        return len({pid for _, pid, _ in self.train})

    @property
    def num_samples(self) -> int:
        return len(self.train)

    def domain_pid(self, label: int) -> object:
        """A client-independent identity key of ``label`` within the client's domain (:attr:`source_pids` when
        the partition recorded it, else keyed by the client's name)."""
        return self.source_pids[label] if self.source_pids is not None else (self.name, label)


@dataclass
class TestSet:
    """A query/gallery pair for evaluation only; a VI test set carries ``modality`` and ``vi_protocol``, a video
    one ``tracklets`` (as :class:`ReIDDataset`)."""

    name: str
    query: list[Sample]
    gallery: list[Sample]
    modality: dict[str, str] | None = None
    vi_protocol: VIProtocol = field(default_factory=VIProtocol)
    tracklets: dict[str, list[str]] | None = None


@dataclass
class Federation:
    """A partition's output: ``clients`` train; ``seen`` has one test set per training domain, ``unseen`` the
    held-out domains; ``holdout``: each client's images kept out of training for audits (``--audit-holdout``,
    :mod:`privreid.data.holdout`), with client labels."""

    protocol: str
    clients: list[ClientData]
    seen: list[TestSet]
    unseen: list[TestSet]
    holdout: dict[str, list[Sample]] = field(default_factory=dict)
