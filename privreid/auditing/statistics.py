"""Per-model membership statistics of the candidates, from one model's features (and classifier) on the probes.

* **prototype loss**: probes classified against the identity prototypes (L2-normalised mean probe features;
  the own identity leave-one-out), cosine logits scaled by :data:`TEMPERATURE`; the cross-entropy of the own
  identity stands in for the identity loss where there is no classifier (a federation's global model).
* **logit-scaled confidence** ``phi = log(p / (1 - p))`` of the own prototype: LiRA's statistic (Carlini et
  al., S&P 2022, Sec. IV-C, Eq. 4) on the prototype classifier, so every model has it.
* **margin**: cosine to the own prototype minus the largest to another's.
* **compactness / nearest neighbour** (identity level): a person's mean pairwise probe cosine, and the mean of
  each probe's largest cosine to another candidate's probe.
* **classifier loss**: ``-CE(logits, label)`` with the audited client's head (image level), or the best
  class's mean log-probability (identity level).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from privreid.auditing.membership import MembershipSet

#: scale of the cosine logits of the prototype classifier (NormFace-style; a choice of privreid)
TEMPERATURE = 10.0


@dataclass
class ProbeOutputs:
    """One model's L2-normalised features (and classifier logits, when it has a head) of the probe images."""

    feats: np.ndarray
    logits: np.ndarray | None
    index: dict[str, int]


def unique_probes(ms: MembershipSet) -> list[str]:
    return sorted({p for c in ms.candidates for p in c.probes})


def probe_outputs(model: torch.nn.Module, paths: list[str], *, height: int, width: int,
                  device: torch.device | str = "cpu", batch_size: int = 128) -> ProbeOutputs:
    """Features (and logits) of ``paths`` under ``model`` (test-time transform, eval mode)."""
    from torch.utils.data import DataLoader

    from privreid.data import ImageDataset, build_transforms

    loader = DataLoader(ImageDataset([(p, 0, 0) for p in paths], build_transforms(height, width, train=False)),
                        batch_size=batch_size, shuffle=False)
    head = getattr(model, "classifier", None)
    feats, logits = [], []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for images, _, _ in loader:
                f = model(images.to(device))
                feats.append(torch.nn.functional.normalize(f.float(), dim=1).cpu().numpy())
                if head is not None:
                    logits.append(head(f).float().cpu().numpy())
    finally:
        model.train(was_training)
    return ProbeOutputs(np.concatenate(feats).astype(np.float64), np.concatenate(logits) if logits else None,
                        {p: i for i, p in enumerate(paths)})


def _probe_table(ms: MembershipSet, out: ProbeOutputs):
    """Rows of every (candidate, probe) pair, their identity index, and identity prototype sums / counts."""
    idents = sorted({c.identity for c in ms.candidates})
    ident_index = {k: i for i, k in enumerate(idents)}
    cand, ident, rows = [], [], []
    for ci, c in enumerate(ms.candidates):
        for p in c.probes:
            cand.append(ci)
            ident.append(ident_index[c.identity])
            rows.append(out.index[p])
    cand, ident, rows = np.array(cand), np.array(ident), np.array(rows)
    feats = out.feats[rows]
    sums = np.zeros((len(idents), feats.shape[1]))
    np.add.at(sums, ident, feats)
    counts = np.bincount(ident, minlength=len(idents)).astype(np.float64)
    return cand, ident, feats, sums, counts


def _per_candidate(values: np.ndarray, cand: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(cand, weights=values, minlength=n) / np.bincount(cand, minlength=n)


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def prototype_statistics(ms: MembershipSet, out: ProbeOutputs) -> dict[str, np.ndarray]:
    """Per candidate: ``loss`` (minus the prototype cross-entropy), ``phi`` and ``margin`` (module docstring)."""
    cand, ident, feats, sums, counts = _probe_table(ms, out)
    protos = _normalise(sums / counts[:, None])
    cos = feats @ protos.T
    loo = _normalise((sums[ident] - feats) / np.maximum(counts[ident] - 1, 1)[:, None])
    own = np.where(counts[ident] > 1, np.einsum("nd,nd->n", feats, loo), 0.0)
    rows = np.arange(len(cand))
    cos[rows, ident] = own
    logits = TEMPERATURE * cos
    logp_all = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    logp = np.minimum(logp_all[rows, ident], -1e-12)
    phi = logp - np.log(-np.expm1(logp))
    others = cos.copy()
    others[rows, ident] = -np.inf
    margin = own - (others.max(axis=1) if cos.shape[1] > 1 else 0.0)
    n = len(ms.candidates)
    return {"loss": _per_candidate(logp, cand, n), "phi": _per_candidate(phi, cand, n),
            "margin": _per_candidate(margin, cand, n)}


def neighbourhood_statistics(ms: MembershipSet, out: ProbeOutputs) -> dict[str, np.ndarray]:
    """Per candidate (identity level): ``compactness``, ``nearest`` and ``compactness - nearest``."""
    cand, _, feats, _, _ = _probe_table(ms, out)
    sim = feats @ feats.T
    same = cand[:, None] == cand[None, :]
    pair = same & ~np.eye(len(cand), dtype=bool)
    n = len(ms.candidates)
    compact = np.bincount(cand[np.nonzero(pair)[0]], weights=sim[pair], minlength=n) / np.maximum(
        np.bincount(cand[np.nonzero(pair)[0]], minlength=n), 1)
    nearest = _per_candidate(np.where(same, -np.inf, sim).max(axis=1), cand, n)
    return {"compactness": compact, "nearest": nearest, "score": compact - nearest}


def classifier_loss(ms: MembershipSet, out: ProbeOutputs) -> np.ndarray | None:
    """Minus the head's cross-entropy per candidate, or None when the head cannot judge every candidate."""
    if out.logits is None:
        return None
    logp = out.logits - np.logaddexp.reduce(out.logits, axis=1, keepdims=True)
    scores = []
    for c in ms.candidates:
        lp = logp[[out.index[p] for p in c.probes]]
        if ms.level == "image":
            if c.label is None or c.label >= lp.shape[1]:
                return None
            scores.append(float(lp[:, c.label].mean()))
        else:
            scores.append(float(lp.mean(axis=0).max()))
    return np.array(scores)
