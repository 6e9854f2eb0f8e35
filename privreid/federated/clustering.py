"""FINCH's first-neighbour clustering, one step (paper 004, Sec. 5.1 and Alg. 2 line 9).

FINCH (Sarfraz, Sharma & Stiefelhagen, "Efficient Parameter-free Clustering Using First Neighbor Relations", CVPR
2019) links every sample to its *first neighbour* ``kappa(i)``, the most similar other sample, and defines the
adjacency

    A(i, j) = 1  if  j = kappa(i)  or  kappa(j) = i  or  kappa(i) = kappa(j)   (FINCH Eq. 1)

whose connected components are the first partition; repeating the step on the cluster means builds FINCH's
hierarchy.  Paper 004 clusters the clients by the features their models extract from one public batch and, because
nine clients collapse into one cluster after two or three steps, runs **one step per round**, from singletons: "Two
clients are first neighbors if their features have the shortest distance (cosine similarity) or they share the same
first neighbor."  So only the first partition is needed.

The third condition of Eq. 1 adds no component: if ``kappa(i) = kappa(j) = m`` then ``i - m - j`` is already a path
through the edges ``{i, kappa(i)}``.  The first partition is therefore the connected components of the graph with one
edge ``{i, kappa(i)}`` per sample, found below with a union-find.

Why not the ``finch-clust`` package (0.2.3, MIT): it depends on scipy and scikit-learn, which privreid does not
otherwise need, to compute the full hierarchy; the single step paper 004 uses is the dozen lines below (numpy only),
written from the paper's definition.
"""

from __future__ import annotations

import numpy as np


def cosine_similarity_matrix(x: np.ndarray) -> np.ndarray:
    """``S[i, j] = cos(x_i, x_j)`` for the rows of a 2-D array (zero rows have similarity 0)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"expected a (num_samples, dim) array, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    return unit @ unit.T


def first_neighbours(x: np.ndarray) -> np.ndarray:
    """``kappa``: for each row, the index of the most cosine-similar *other* row.

    Ties go to the lowest index (``np.argmax``), so the result is deterministic.
    A single row is its own first neighbour.
    """
    sim = cosine_similarity_matrix(x)
    n = len(sim)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    np.fill_diagonal(sim, -np.inf)
    return np.argmax(sim, axis=1).astype(np.int64)


def first_partition(x: np.ndarray) -> np.ndarray:
    """FINCH's first partition of the rows of ``x`` (cosine similarity): one cluster label per row.

    Labels are ``0..C-1``, numbered in the order of each cluster's first row.
    """
    x = np.asarray(x)
    n = len(x)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    kappa = first_neighbours(x)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in enumerate(kappa.tolist()):  # one edge {i, kappa(i)} per row
        ri, rj = root(i), root(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    labels = np.empty(n, dtype=np.int64)
    ids: dict[int, int] = {}
    for i in range(n):
        labels[i] = ids.setdefault(root(i), len(ids))
    return labels


def groups(labels: np.ndarray) -> list[list[int]]:
    """Row indices per cluster, clusters in label order, rows ascending."""
    out: dict[int, list[int]] = {}
    for i, label in enumerate(np.asarray(labels).tolist()):
        out.setdefault(int(label), []).append(i)
    return [out[k] for k in sorted(out)]
