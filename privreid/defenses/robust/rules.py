"""Byzantine-robust server aggregation and server-side norm bounding.

Two mechanisms a server can run against its own poisoned clients:

* :class:`RobustAggregate` replaces a method's plain mean of the uploads (FedPav / FedAvg's data-volume mean,
  FedReID's uniform mean) by a Byzantine-robust rule: on Flower's own functions (``flwr.server.strategy.aggregate``)
  Krum / Multi-Krum (Blanchard et al. 2017), the coordinate-wise median and trimmed mean (Yin et al. 2018) and Bulyan
  (El Mhamdi et al. 2018); written here, on the updates, the geometric median (RFA), centered clipping, FoolsGold and
  FLTrust; FLAME on scikit-learn's HDBSCAN.  The rules run on every floating tensor of the uploads (parameters and
  BatchNorm's running statistics); integer buffers are the heaviest upload's, as in the plain mean
  (:class:`~privreid.federated.strategy.WeightedSum`).  A robust rule needs every upload at once
  (:class:`~privreid.federated.strategy.KeepUploads`).  A rule that selects, drops or zero-weights clients (Krum,
  Multi-Krum, Bulyan, FoolsGold, FLTrust, FLAME) says which (:class:`Verdict`), and the round's ``records`` carry
  ``{"scope": "defense", "defense": name, "accepted": [...], "rejected": [...]}``.  FoolsGold and centered clipping
  remember across rounds (per-client histories, a server-wide momentum): the engine's server state
  (:meth:`~privreid.federated.strategy.Strategy.with_server_state`), checkpointed, so a resumed run continues exactly.
* :class:`BoundedNorm` clips each client's update ``theta_k - theta`` on the trainable parameters to an L2 bound
  before the inner strategy sees it (norm bounding, Sun et al. 2019, "Can you really backdoor federated learning?"),
  and with ``noise > 0`` adds ``N(0, noise^2)`` to the aggregate's trainable parameters (their "weak DP": no accounted
  epsilon).  It streams when the inner strategy does and wraps any inner strategy, client-level DP's included (whose
  own clip then applies on top); its record names the clients it ``clipped``.

Both read each client's update on its own: under ``--secure-aggregation`` the server sees only the sum, so they are
refused with it, except norm-bound, which becomes a verified bound on the secure sum's inputs there
(:mod:`privreid.defenses.robust.plugin`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from privreid.errors import ConfigError
from privreid.federated.policy import StateDict
from privreid.federated.strategy import (SERVER_ENTRY, Accumulator, ClientServerState, DataVolumeAverage, RoundResult,
                                         ServerState, Strategy, UniformAverage, Upload)
from privreid.defenses.beta_noise.mechanism import add_white_noise
from privreid.defenses.client_dp.mechanism import clip_update, update_norm


class Results(list):
    """Flower's ``[(arrays, num_samples), ...]`` of a round, one array per floating key; ``keys``: those keys;
    ``clients``: the uploads' clients, in order; ``kept``: the server state of earlier rounds (for the rules that
    remember)."""

    def __init__(self, results, keys: list[str], clients: Collection[str] = (), kept: ServerState | None = None):
        super().__init__(results)
        self.keys, self.clients, self.kept = keys, list(clients), kept or {}


#: ``Results -> arrays`` (Flower's signature of an aggregation rule), or ``-> Verdict`` for a rule that selects
Rule = Callable[[Results], "list[np.ndarray] | Verdict"]

#: the plain means a robust rule may replace
REPLACEABLE = (DataVolumeAverage, UniformAverage)


@dataclass
class Verdict:
    """A rule's aggregate (one array per floating key) and the uploads it ``accepted`` (their indices; ``None``
    for a rule that selects no client: the median and trimmed mean mix every upload coordinate by coordinate);
    ``keep``: the server state it keeps for later rounds (``RoundResult.client_state``)."""

    arrays: list[np.ndarray]
    accepted: list[int] | None = None
    keep: dict[str, ClientServerState] = dataclasses.field(default_factory=dict)


def krum_scores(results: list[tuple[list[np.ndarray], int]], f: int) -> list[float]:
    """Krum's score of each upload (Blanchard et al. 2017, Eq. 4): the sum of its squared distances to its
    ``n - f - 2`` nearest, computed as Flower's ``aggregate_krum`` computes it (its own distance helper, the same
    ``argsort``), so that the selection a record reports is the one Flower made."""
    from flwr.server.strategy.aggregate import _compute_distances  # Flower's, so the scores are bit-identical

    distances = _compute_distances([arrays for arrays, _ in results])
    closest = max(1, len(results) - f - 2)
    return [float(np.sum(row[np.argsort(row)[1:closest + 1]])) for row in distances]


def krum_rule(f: int, keep: int) -> Rule:
    """Krum (``keep`` 0: the best-scored upload, :func:`krum_scores`) or Multi-Krum (the unweighted mean of the
    ``keep`` best-scored, as Blanchard et al. 2017 define it: reported sample counts are the clients' to lie about, so
    Flower's ``aggregate_krum`` is given a count of 1 for every upload).  Accepted: the chosen upload(s), by Flower's
    own expressions."""
    from flwr.server.strategy.aggregate import aggregate_krum

    def rule(results):
        unweighted = [(arrays, 1) for arrays, _ in results]
        scores = krum_scores(unweighted, f)
        chosen = np.argsort(scores)[::-1][len(scores) - keep:] if keep > 0 else [np.argmin(scores)]
        return Verdict(aggregate_krum(unweighted, num_malicious=f, to_keep=keep), sorted(int(i) for i in chosen))

    return rule


def median_rule() -> Rule:
    """The coordinate-wise median of the uploads (unweighted)."""
    from flwr.server.strategy.aggregate import aggregate_median

    return aggregate_median


def trimmed_mean_rule(fraction: float) -> Rule:
    """The coordinate-wise mean after dropping the ``int(fraction * n)`` largest and smallest values (unweighted)."""
    from flwr.server.strategy.aggregate import aggregate_trimmed_avg

    return lambda results: aggregate_trimmed_avg(results, proportiontocut=fraction)


def bulyan_selection(results: list[tuple[list[np.ndarray], int]], f: int) -> list[int]:
    """The ``n - 2f`` uploads Bulyan's repeated Krum selects, as Flower's ``aggregate_bulyan`` selects them (Krum's
    pick on the remaining uploads, found again as the first upload equal to it), as indices into ``results``."""
    left, chosen = list(range(len(results))), []
    for _ in range(len(results) - 2 * f):
        scores = krum_scores([results[i] for i in left], f)
        best = results[left[int(np.argmin(scores))]][0]
        index = next(i for i in left if all(np.array_equal(a, b) for a, b in zip(results[i][0], best)))
        chosen.append(index)
        left.remove(index)
    return sorted(chosen)


def bulyan_rule(f: int) -> Rule:
    """Bulyan: ``n - 2f`` uploads chosen by repeated Krum (accepted: :func:`bulyan_selection`), then the mean of the
    ``n - 4f`` values closest to their coordinate-wise median."""
    from flwr.server.strategy.aggregate import aggregate_bulyan, aggregate_krum

    return lambda results: Verdict(
        aggregate_bulyan(list(results), num_malicious=f, aggregation_rule=aggregate_krum, to_keep=0),
        bulyan_selection(results, f))


# The rules below have no implementation in Flower (flwr.server.strategy.aggregate offers the mean, median,
# trimmed mean, Krum and Bulyan; its strategies none of these) nor in scikit-learn (whose HDBSCAN FLAME uses), so
# they are written here in numpy, on the updates ``Delta_i = theta_i - theta`` flattened into the rows of one
# float64 matrix.

def _flat(results: list[tuple[list[np.ndarray], int]]) -> np.ndarray:
    return np.stack([np.concatenate([a.ravel() for a in arrays]) if arrays else np.zeros(0) for arrays, _ in results])


def _unflat(vector: np.ndarray, like: list[np.ndarray]) -> list[np.ndarray]:
    out, start = [], 0
    for a in like:
        out.append(vector[start:start + a.size].reshape(a.shape))
        start += a.size
    return out


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarities of the rows of ``a`` and ``b`` (0 where a row is zero)."""
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    dots = a @ b.T
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.outer(na, nb) > 0, dots / np.outer(na, nb), 0.0)


def geometric_median(points: np.ndarray, iterations: int, nu: float) -> np.ndarray:
    """RFA's smoothed Weiszfeld algorithm (Pillutla, Kakade & Harchaoui 2022, Algorithm 2): from the mean
    ``z_0``, ``beta_i = alpha_i / max(nu, ||z_r - w_i||)`` and ``z_{r+1} = sum_i beta_i w_i / sum_i beta_i``
    for ``iterations`` steps.  Deviation: ``alpha_i = 1/n`` (RFA weighs by the sample counts ``n_i``, which
    clients report and may inflate; Krum and Bulyan here ignore them too)."""
    z = points.mean(axis=0)
    for _ in range(iterations):
        beta = 1.0 / np.maximum(nu, np.linalg.norm(points - z, axis=1))
        z = beta @ points / beta.sum()
    return z


def geomed_rule(iterations: int, nu: float) -> Rule:
    """The geometric median of the updates (:func:`geometric_median`); it selects no client."""
    return lambda results: _unflat(geometric_median(_flat(results), iterations, nu), results[0][0])


def centered_clip(points: np.ndarray, tau: float, iterations: int, start: np.ndarray) -> np.ndarray:
    """Centered clipping (Karimireddy, He & Jaggi 2021, Eq. (CC)): from ``v = start``, ``v <- v + (1/n) sum_i
    (x_i - v) * min(1, tau / ||x_i - v||)``, ``iterations`` times."""
    v = start
    for _ in range(iterations):
        diff = points - v
        norms = np.linalg.norm(diff, axis=1)
        scale = np.where(norms > tau, tau / np.where(norms > 0, norms, 1.0), 1.0)
        v = v + (diff * scale[:, None]).mean(axis=0)
    return v


#: centered clipping's server-wide state: the previous round's aggregate update ``v`` (flat, float64)
CC_MOMENTUM = "centered-clipping/momentum"


def centered_clipping_rule(tau: float, iterations: int) -> Rule:
    """Centered clipping of the updates (:func:`centered_clip`) from the previous round's aggregate ``v_{t-1}``
    (the paper's start: the server's previous aggregate momentum), kept as the server-wide :data:`CC_MOMENTUM`;
    it selects no client.  Deviations: the first round, with nothing kept, starts from the round's coordinate-wise
    median (the paper leaves it open; from 0, as public implementations start, each iteration moves ``v`` by at
    most ``tau``); the clients send their round's update, not a worker momentum (the paper's Algorithm 2)."""
    def rule(results):
        points, kept = _flat(results), results.kept.get(SERVER_ENTRY, {}).get(CC_MOMENTUM)
        start = np.median(points, axis=0) if kept is None else kept.to(torch.float64).numpy()
        v = centered_clip(points, tau, iterations, start)
        return Verdict(_unflat(v, results[0][0]), keep={SERVER_ENTRY: {CC_MOMENTUM: torch.from_numpy(v.copy())}})

    return rule


def foolsgold_weights(history: np.ndarray, kappa: float = 1.0) -> np.ndarray:
    """FoolsGold's weights (Fung, Yoon & Beschastnikh 2020, Algorithm 1, lines 4-20): ``cs_ij`` the cosine
    similarity of clients i and j's histories, ``v_i = max_j cs_ij``; pardoning ``cs_ij *= v_i / v_j`` where
    ``v_j > v_i``; ``alpha_i = 1 - max_j cs_ij`` clipped to [0, 1], divided by its maximum, 1 set to 0.99, then
    the logit ``kappa (ln(alpha_i / (1 - alpha_i)) + 0.5)`` clipped to [0, 1].  All zero (every client has a
    twin, e.g. identical updates) when the maximum is 0."""
    n = len(history)
    cs = _cosine(history, history) - np.eye(n)
    v = cs.max(axis=1)
    for i in range(n):
        for j in range(n):
            if i != j and v[j] > v[i] and v[j] > 0:
                cs[i, j] *= v[i] / v[j]
    alpha = np.clip(1.0 - cs.max(axis=1), 0.0, 1.0)
    alpha[alpha < 1e-9] = 0.0  # a cosine of 1 up to rounding: a twin, whatever the last bits say
    if alpha.max() <= 0:
        return np.zeros(n)
    alpha = alpha / alpha.max()
    alpha[alpha == 1.0] = 0.99
    with np.errstate(divide="ignore"):
        logit = kappa * (np.log(alpha / (1.0 - alpha)) + 0.5)
    return np.clip(np.nan_to_num(logit, neginf=0.0), 0.0, 1.0)


#: FoolsGold's per-client state: the client's history ``H_i`` (flat, float32)
FG_HISTORY = "foolsgold/history"


def foolsgold_rule(kappa: float) -> Rule:
    """FoolsGold (Fung, Yoon & Beschastnikh 2020, Algorithm 1): each client's history ``H_i = H_i + Delta_i``
    (the sum of its updates over the rounds it took part in, kept per client as :data:`FG_HISTORY`), the
    weights ``alpha`` from the round's clients' histories (:func:`foolsgold_weights`) and the update ``sum_i alpha_i
    Delta_i / sum_i alpha_i`` of this round's updates; accepted: the clients with ``alpha_i > 0``; no update when
    every weight is 0.  Deviations: the histories cover every floating tensor (the paper's importance weighting of
    the output layer does not apply: the classifier is not shared) and are kept in float32 (one vector of the
    update's size per client that took part); only the round's clients are compared (the paper's all take part
    every round); the weights are normalised by their sum (the paper's Algorithm 1 adds ``sum_i alpha_i Delta_i``
    as a gradient step)."""
    def rule(results):
        updates = _flat(results)
        kept = [results.kept.get(c, {}).get(FG_HISTORY) for c in results.clients]
        history = updates + np.stack([np.zeros(updates.shape[1]) if h is None else h.to(torch.float64).numpy()
                                      for h in kept])
        alpha = foolsgold_weights(history, kappa)
        total = alpha @ updates / alpha.sum() if alpha.sum() > 0 else np.zeros(updates.shape[1])
        keep = {c: {FG_HISTORY: torch.from_numpy(h.astype(np.float32))} for c, h in zip(results.clients, history)}
        return Verdict(_unflat(total, results[0][0]), [i for i, a in enumerate(alpha) if a > 0], keep)

    return rule


def fltrust_aggregate(updates: np.ndarray, root: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FLTrust (Cao, Fang, Liu & Gong, NDSS 2021, Eq. 2-4): trust scores ``TS_i = ReLU(cos(g_i, g_0))``, each
    update rescaled to ``||g_0||``, and ``g = sum_i TS_i (||g_0|| / ||g_i||) g_i / sum_j TS_j`` (zero when every
    score is 0).  Returns ``(g, TS)``."""
    scores = np.maximum(_cosine(updates, root[None, :])[:, 0], 0.0)
    norms = np.linalg.norm(updates, axis=1)
    scaled = updates * (np.linalg.norm(root) / np.where(norms > 0, norms, 1.0))[:, None]
    return (scores @ scaled / scores.sum() if scores.sum() > 0 else np.zeros(updates.shape[1])), scores


def fltrust_rule(root: Mapping[str, torch.Tensor]) -> Rule:
    """FLTrust (:func:`fltrust_aggregate`) against the server's root update ``root`` (a state dict covering the
    uploads' floating keys); accepted: the clients with a positive trust score.  Deviation: ``g_0`` is given,
    the same every round (the paper's server trains it each round on its root data set; privreid's public set is
    unlabelled, so the method's supervised update cannot run on it)."""
    def rule(results):
        missing = [k for k in results.keys if k not in root]
        if missing:
            raise ConfigError(f"defense 'fltrust': the root update lacks {len(missing)} uploaded keys, e.g. "
                              f"{missing[0]!r}")
        g0 = np.concatenate([root[k].detach().to("cpu", torch.float64).numpy().ravel() for k in results.keys])
        total, scores = fltrust_aggregate(_flat(results), g0)
        return Verdict(_unflat(total, results[0][0]), [i for i, s in enumerate(scores) if s > 0])

    return rule


def flame_admitted(updates: np.ndarray) -> np.ndarray:
    """FLAME's model filtering (Nguyen et al., USENIX Security 2022, Algorithm 1, step 1): HDBSCAN
    (scikit-learn's) on the pairwise cosine distances ``c_ij = 1 - cos(u_i, u_j)`` of the rows ``u_i``, with
    ``min_cluster_size = n // 2 + 1`` (the paper's majority), ``min_samples = 1`` and a single cluster allowed
    (the setting of the public implementations: with a majority size at most one cluster exists).  Returns the
    sorted indices of the largest cluster; HDBSCAN's noise points are rejected (none admitted if all are noise)."""
    from sklearn.cluster import HDBSCAN

    n = len(updates)
    distances = np.clip(1.0 - _cosine(updates, updates), 0.0, 2.0)
    np.fill_diagonal(distances, 0.0)  # a zero update's cosine is 0 here, its distance to itself still 0
    labels = HDBSCAN(min_cluster_size=n // 2 + 1, min_samples=1, metric="precomputed", allow_single_cluster=True,
                     copy=True).fit(distances).labels_
    clustered = labels[labels >= 0]
    return np.flatnonzero(labels == np.bincount(clustered).argmax()) if clustered.size else np.zeros(0, dtype=int)


def flame_rule(noise_lambda: float, parameters: Collection[str]) -> Rule:
    """FLAME (Nguyen et al., USENIX Security 2022, Algorithm 1), on the updates ``u_i = W_i - G_{t-1}``:

    1. model filtering: the admitted updates ``b_1..b_L`` (:func:`flame_admitted`);
    2. adaptive clipping: ``e_i = ||u_i||`` for every client, ``S_t = median(e_1..e_n)``, each admitted update
       scaled by ``min(1, S_t / e_i)``, and their unweighted mean ``sum_l u_{b_l} / L``;
    3. adaptive noising: ``+ N(0, sigma^2)``, ``sigma = noise_lambda * S_t`` (their Sec. 5: 0.001 for image
       tasks; their Sec. 4 derives it from an (epsilon, delta): the defense's ``Flame.noise_level``), on the keys
       in ``parameters`` (the trainable parameters, as weak DP).

    Accepted: the admitted clients; no update when none is admitted.  Deviations: the cosine distances are the
    updates' (the paper's are the local models', whose cosines all lie near 1 around the shared global model);
    the updates cover every floating tensor (BatchNorm's running statistics too)."""
    def rule(results):
        updates = _flat(results)
        norms = np.linalg.norm(updates, axis=1)
        bound = float(np.median(norms))
        admitted = flame_admitted(updates)
        scale = np.minimum(1.0, bound / np.where(norms[admitted] > 0, norms[admitted], 1.0))
        total = (updates[admitted] * scale[:, None]).mean(axis=0) if admitted.size else np.zeros(updates.shape[1])
        mean = {k: torch.from_numpy(a) for k, a in zip(results.keys, _unflat(total, results[0][0]))}
        noisy = add_white_noise(mean, noise_lambda * bound, parameters)
        return Verdict([noisy[k].numpy() for k in results.keys], admitted.tolist())

    return rule


class RobustAggregate(Strategy):
    """A Byzantine-robust ``rule`` over the floating tensors of the round's uploads (see the module docstring).

    Computed in float64 and cast back to each tensor's dtype; clients receive the global state.  ``updates``: the rule
    sees the updates ``theta_i - theta`` and returns one (the rules written here), else the uploaded states (Flower's).
    ``check(n)`` raises :class:`ConfigError` when the rule cannot run on the ``n`` uploads a round actually aggregates;
    it is called every round, before the rule.  A rule that selects clients adds the detection record.  ``kept``: the
    server state of earlier rounds (:meth:`with_server_state`), which the rule reads; what its verdict keeps is the
    result's ``client_state``."""

    def __init__(self, rule: Rule, check: Callable[[int], None] = lambda n: None, name: str = "",
                 updates: bool = False, kept: ServerState | None = None):
        self.rule, self.check, self.name, self.updates, self.kept = rule, check, name, updates, kept

    def with_server_state(self, server_state: ServerState) -> RobustAggregate:
        return RobustAggregate(self.rule, self.check, self.name, self.updates, server_state)

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> RoundResult:
        if not uploads:
            raise ValueError("cannot aggregate zero uploads")
        self.check(len(uploads))
        first = uploads[0].state
        for up in uploads[1:]:
            if up.state.keys() != first.keys():
                raise ValueError(f"client {up.client} uploaded a different set of keys")
        floating = [k for k, v in first.items() if torch.is_floating_point(v)]
        as64 = {k: [up.state[k].detach().to("cpu", torch.float64) for up in uploads] for k in floating}
        if self.updates:
            as64 = {k: [t - global_state[k].detach().to("cpu", torch.float64) for t in ts] for k, ts in as64.items()}
        results = Results([([as64[k][i].numpy() for k in floating], up.num_samples) for i, up in enumerate(uploads)],
                          floating, [up.client for up in uploads], self.kept)
        verdict = self.rule(results)
        verdict = verdict if isinstance(verdict, Verdict) else Verdict(verdict)
        out: StateDict = {}
        for k, a in zip(floating, verdict.arrays):
            value = torch.as_tensor(np.asarray(a, dtype=np.float64))
            if self.updates:
                value = global_state[k].detach().to("cpu", torch.float64) + value
            out[k] = value.to(first[k].device, first[k].dtype)
        heaviest = max(uploads, key=lambda up: up.num_samples)  # the first one on ties, as WeightedSum
        out.update({k: v.clone() for k, v in heaviest.state.items() if k not in out})
        if verdict.accepted is None:
            return RoundResult(out, verdict.keep)
        accepted = [uploads[i].client for i in verdict.accepted]
        return RoundResult(out, verdict.keep, records=[{"scope": "defense", "defense": self.name, "accepted": accepted,
                                          "rejected": [up.client for up in uploads if up.client not in accepted]}])


def replace_plain_mean(inner: Strategy, rule: Rule, name: str, method_name: str,
                       check: Callable[[int], None] = lambda n: None, updates: bool = False) -> RobustAggregate:
    """``RobustAggregate(rule, check, name, updates)`` in place of ``inner``; ConfigError unless it is a plain mean."""
    if type(inner) not in REPLACEABLE:
        raise ConfigError(f"defense {name!r} replaces a plain mean of the uploads; {method_name!r} aggregates with "
                          f"{type(inner).__name__} here, whose weights, clusters or noise a robust rule would drop")
    return RobustAggregate(rule, check, name, updates)


class BoundedNorm(Strategy):
    """Each upload's update clipped to ``bound`` on ``parameters`` before ``inner`` sees it; ``noise`` std of
    Gaussian noise on the aggregate's ``parameters`` (0: none).  Other keys pass through unchanged.  The round's
    record ``{"scope": "defense", "defense": name, "clipped": [clients whose update was over the bound]}``."""

    def __init__(self, inner: Strategy, bound: float, noise: float, parameters: Collection[str],
                 name: str = "norm-bound"):
        self.inner, self.bound, self.noise, self.parameters = inner, float(bound), float(noise), frozenset(parameters)
        self.name = name

    def configure(self, global_state, client, client_server_state, round_index):
        return self.inner.configure(global_state, client, client_server_state, round_index)

    def with_server_state(self, server_state: ServerState) -> BoundedNorm:
        return BoundedNorm(self.inner.with_server_state(server_state), self.bound, self.noise, self.parameters,
                           self.name)

    def accumulator(self, global_state: StateDict) -> Accumulator:
        return _Bounded(self, global_state, self.inner.accumulator(global_state))


class _Bounded(Accumulator):
    def __init__(self, strategy: BoundedNorm, global_state: StateDict, inner: Accumulator):
        self.strategy, self.global_state, self.inner = strategy, global_state, inner
        self.keys = [k for k in global_state if k in strategy.parameters]
        self.clipped: list[str] = []

    def add(self, upload: Upload) -> None:
        g, state = self.global_state, upload.state
        update = {k: state[k].double() - g[k].double() for k in self.keys}
        if update_norm(update) > self.strategy.bound:
            self.clipped.append(upload.client)
        clipped = clip_update(update, self.strategy.bound)
        bounded = {**state, **{k: (g[k].double() + clipped[k]).to(state[k].dtype) for k in self.keys}}
        self.inner.add(Upload(upload.client, bounded, upload.num_samples, upload.metrics, upload.reports))

    def result(self) -> RoundResult:
        result = self.inner.result()
        record = {"scope": "defense", "defense": self.strategy.name, "clipped": list(self.clipped)}
        result = dataclasses.replace(result, records=[*result.records, record])
        if self.strategy.noise <= 0:
            return result
        noisy = add_white_noise(result.global_state, self.strategy.noise, self.strategy.parameters)
        return dataclasses.replace(result, global_state=noisy)
