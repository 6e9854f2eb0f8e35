"""Plain data records shared by loaders, partitions and the training code.

A sample is a ``(path, pid, camid)`` tuple, exactly as in torchreid:

* ``pid``: identity label.  In ``train`` splits, pids are relabelled to
  ``0..num_train_pids-1``; in ``query`` / ``gallery`` they keep the value parsed
  from the file name (``0`` = distractor).  Junk images (pid ``-1``) are dropped
  at load time.
* ``camid``: 0-based camera index parsed from the file name (``c1`` -> 0).

Visible-infrared (VI) and video datasets keep that tuple and add side
mappings keyed by the sample path (:mod:`privreid.data.formats.vi`):

* ``modality[path]`` is :data:`VISIBLE` or :data:`INFRARED`;
* for video, a sample is a *tracklet*: its ``path`` is a key (the tracklet's
  directory where the layout has one) and ``tracklets[path]`` lists its frame
  image paths in temporal order;
* ``vi_protocol`` says how the cross-modality test split is ranked
  (:class:`VIProtocol`, used by :mod:`privreid.evaluation.cross_modality`).

The ``query`` / ``gallery`` lists of a VI dataset are the infrared-to-visible
split (query infrared, gallery visible), the mode L2RW+ reports, so that a
plain Market-1501-style evaluation of them is already that mode.
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

    ``gallery_trials``
        ``1``: the whole gallery.  ``n > 1``: ``n`` single-shot galleries, each
        one image (tracklet) drawn at random per (identity, camera); metrics
        are averaged over the trials (SYSU-MM01 and LLCM, 10 trials).
    ``cmc_by_identity``
        CMC counts distinct gallery identities: the rank of the first match is
        one plus the number of *identities* ranked before it (the "new_cmc" of
        the SYSU-MM01 / LLCM evaluation code).  mAP and mINP always rank images.
    ``colocated_cameras``
        0-based camera pairs at one location: a query from one of them ignores
        the *whole* gallery of the other, whatever the identity (SYSU-MM01:
        infrared camera 3 and visible camera 2 are in one room).

    ``seq_len``
        video: the frames ``T`` averaged into a tracklet's feature at
        evaluation (L2RW+ Eq. 9 and Sec. IV-B: 6 for HITSZ-VCM, 10 for
        BUPTCampus).

    Every protocol also drops gallery items of the query's identity seen by
    the query's camera (the Market-1501 rule of :func:`privreid.evaluation.metrics.evaluate`);
    it only matters for cameras that record both modalities (LLCM, synthetic VI).
    """

    gallery_trials: int = 1
    cmc_by_identity: bool = False
    colocated_cameras: tuple[tuple[int, int], ...] = ()
    seq_len: int = 6


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
    #: video clients: ``path -> frame paths`` of every tracklet (None: images)
    tracklets: dict[str, list[str]] | None = None

    @property
    def num_classes(self) -> int:
        return len({pid for _, pid, _ in self.train})

    @property
    def num_samples(self) -> int:
        return len(self.train)

    def domain_pid(self, label: int) -> object:
        """A client-independent identity key of ``label`` within the client's domain.

        Client labels are relabelled per client; the domain-level identity is
        recovered from :attr:`source_pids` when the partition recorded it, else
        the client name keeps identities of different clients distinct.
        """
        return self.source_pids[label] if self.source_pids is not None else (self.name, label)


@dataclass
class TestSet:
    """A query/gallery pair used for evaluation only (e.g. an unseen domain).

    The optional fields are those of :class:`ReIDDataset`: a VI test set
    carries ``modality`` (so an evaluation mode can restrict the query to one
    modality and the gallery to the other) and its ``vi_protocol``; a video
    test set carries ``tracklets``.
    """

    name: str
    query: list[Sample]
    gallery: list[Sample]
    modality: dict[str, str] | None = None
    vi_protocol: VIProtocol = field(default_factory=VIProtocol)
    tracklets: dict[str, list[str]] | None = None


@dataclass
class Federation:
    """The output of a partition protocol.

    ``clients`` train; ``seen`` holds one test set per training domain (shared
    by that domain's clients); ``unseen`` holds held-out domains, never trained
    on (leave-one-domain-out / EI-style generalisation).  ``holdout`` maps a
    client to its training images kept out of training for membership audits
    (``--audit-holdout``, :mod:`privreid.data.holdout`), with client labels.
    """

    protocol: str
    clients: list[ClientData]
    seen: list[TestSet]
    unseen: list[TestSet]
    holdout: dict[str, list[Sample]] = field(default_factory=dict)
