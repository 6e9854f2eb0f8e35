"""Memory rectification bank (MRB) of L2RW+'s DPPT (Jiang et al., paper 003, Sec. III-C, Eq. 3-6).

Pure tensor functions plus the per-round feature collector a client uses; :mod:`privreid.federated.methods.dppt`
wires them into federated rounds.

* Local memory (Eq. 3-4, :func:`refined_centre`): for each identity ``k`` a client holds, the mean ``c_k`` of its
  L2-normalised feature embeddings, refined to the mean of the ``K`` embeddings closest to ``c_k`` (Euclidean) when
  it has at least ``K`` of them.  The embeddings are those the client computed during its local training of the
  round (with augmentation, detached), :class:`FeatureBank`.
* Global memory (Eq. 5, :func:`global_memory`): per identity, the mean of the local centres of the clients that hold
  it; the indicator ``1{c_i^m != 0}`` is "client ``m`` uploaded a centre for ``i``", so identities missing from some
  clients are averaged over the others only.
* Loss (Eq. 6, :func:`mrb_loss`): ``1 - cos(z_i, c^g_{y_i})`` averaged over the batch, pulling each embedding towards
  its identity's global centre of the previous round.

Choices where the paper is open:

* Features are L2-normalised before they enter the memory, as Sec. III-C says ("store l2-normalized feature
  embedding z"); the reference code stores the un-normalised bottleneck output.
* Eq. 6 is the paper's cosine loss; the reference code adds an MSE term (0.5 MSE + 0.5 cosine), which privreid does
  not.
* Samples whose identity has no global centre yet (a client's first round, or an identity no participating client
  uploaded) are left out of the Eq. 6 mean; with none at all the loss is 0.
* :func:`global_memory` keeps the previous global centre of an identity no client uploaded this round (only possible
  with a client fraction below 1; with every client participating, as in the paper, it is Eq. 5 exactly).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import torch
import torch.nn.functional as F


def refined_centre(features: torch.Tensor, k: int) -> torch.Tensor:
    """Eq. 3-4: the mean of ``features`` ``(n, D)``, or of the ``k`` rows closest to it when ``n >= k``."""
    if features.dim() != 2 or len(features) == 0:
        raise ValueError(f"refined_centre needs a non-empty (n, D) tensor, got shape {tuple(features.shape)}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    centre = features.mean(0)
    if len(features) < k:
        return centre
    closest = torch.linalg.vector_norm(features - centre, dim=1).topk(k, largest=False).indices
    return features[closest].mean(0)


def local_memory(features: torch.Tensor, labels: torch.Tensor, k: int) -> dict[int, torch.Tensor]:
    """``M^l_m``: label -> :func:`refined_centre` of that label's rows of ``features`` ``(N, D)``."""
    if len(features) != len(labels):
        raise ValueError("one label per feature row is required")
    return {int(label): refined_centre(features[labels == label], k) for label in torch.unique(labels)}


def global_memory(local: Sequence[Mapping[Hashable, torch.Tensor]],
                  previous: Mapping[Hashable, torch.Tensor] | None = None) -> dict[Hashable, torch.Tensor]:
    """Eq. 5: identity -> mean of the centres uploaded for it, over the clients that uploaded one.

    ``local`` holds one memory per client, keyed by a client-independent
    identity key.  Identities in ``previous`` that no client uploaded keep
    their previous centre.
    """
    sums: dict[Hashable, torch.Tensor] = {}
    counts: dict[Hashable, int] = {}
    dtypes: dict[Hashable, torch.dtype] = {}
    for memory in local:
        for key, centre in memory.items():
            if key not in sums:
                sums[key], counts[key], dtypes[key] = torch.zeros_like(centre, dtype=torch.float64), 0, centre.dtype
            sums[key] += centre.to(torch.float64)
            counts[key] += 1
    out = {key: value.clone() for key, value in (previous or {}).items()}
    for key, total in sums.items():
        out[key] = (total / counts[key]).to(dtypes[key])
    return out


def mrb_loss(features: torch.Tensor, labels: torch.Tensor, centres: torch.Tensor,
             known: torch.Tensor) -> torch.Tensor:
    """Eq. 6: mean over samples of ``1 - cos(z_i, c^g_{y_i})``.

    ``centres`` ``(C, D)`` holds the previous round's global centre of each
    of the client's ``C`` labels, ``known`` ``(C,)`` whether it exists;
    samples whose label has none are left out (0 when no sample has one).
    """
    keep = known[labels]
    if not keep.any():
        return features.sum() * 0.0
    cos = F.cosine_similarity(features[keep], centres[labels[keep]].to(features.dtype), dim=1)
    return (1 - cos).mean()


class FeatureBank:
    """The client's local memory ``M^l`` during one round: L2-normalised, detached embeddings and labels."""

    def __init__(self) -> None:
        self._features: list[torch.Tensor] = []
        self._labels: list[torch.Tensor] = []

    def __len__(self) -> int:
        return sum(len(f) for f in self._features)

    def add(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        self._features.append(F.normalize(features.detach(), dim=1))
        self._labels.append(labels.detach())

    def centres(self, k: int) -> dict[int, torch.Tensor]:
        """:func:`local_memory` of everything added (empty when nothing was)."""
        if not self._features:
            return {}
        return local_memory(torch.cat(self._features), torch.cat(self._labels), k)
