"""Secure aggregation (``--secure-aggregation``): the server learns the sum of a round's uploads, not one of them.

Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine Learning", CCS 2017, and SecAgg+ (Bell
et al., CCS 2020), run with Flower's primitives (:mod:`privreid.defenses.secure_aggregation.protocol`).
:func:`with_secure_aggregation` wraps the method's server strategy in :class:`SecureAggregate`:

* client side, each selected client turns its upload into the vector it masks: its update ``Delta_k = theta_k -
  theta`` on the model's shared floating keys, pre-scaled by ``w_k / max_weight`` (``w_k``: the weight the method's
  strategy gives the upload, ``n_k`` for data-volume averages, 1 for uniform ones), and the tensors it adds to its
  upload outside the model (DPPT's per-identity class centres) in a sparse block with 0/1 indicators;
* the server obtains ``sum_k w_k Delta_k``, ``sum_k w_k`` and, for every extra key, the sum over its senders and
  their count, quantised;
* the method's strategy then receives **one** upload, the dequantised ``theta + sum_k w_k Delta_k / sum_k w_k``
  (extras: mean over senders) with weight ``sum_k w_k``, never one client's ``Upload``.  For a weighted-mean strategy
  (FedAvg / FedPav, Alg. 1 line 7 of paper 004; FedReID's uniform mean, paper 002 Eq. 9; DPPT's Eq. 5 and 8) this is
  the same aggregate up to the quantisation error; strategies that read each upload (CDW, KS, KD, clustering) are
  refused, as ``Method.needs_per_client_uploads`` declares.

``max_weight``: Flower's default is 1000 (its examples' sample counts).  privreid's default is the largest weight a
client of the round can carry (the public client sizes, as the DP statements treat them): every weight ratio is then
at most 1, so nothing overflows and no precision is lost to a loose bound (with uniform weights Flower's 1000 would
scale each update by 1/1000, about 10 bits of the 22).  Updates rather than parameters are summed (Flower's mod sums
the returned parameters) for the same reason: updates are small, so the clipping range wastes less of the grid.

Integer buffers (BatchNorm's ``num_batches_tracked``) are not summed; the global model keeps the server's value
(plain aggregation takes them from the heaviest client, a per-client value the server does not see here).

On Flower (``privreid flower run --secure-aggregation``) the same client-side vector goes through Flower's own
``secaggplus_mod`` and ``SecAggPlusWorkflow`` (:mod:`privreid.defenses.secure_aggregation.flower`), and the strategy
receives the result as one :class:`AggregatedUpload`; in-process,
:func:`~privreid.defenses.secure_aggregation.protocol.secure_sum` runs the same steps on Flower's primitives.

Composition (:func:`with_secure_aggregation` is applied after DP and beta noise):

* ``--client-dp``: distributed DP.  Each client clips its update to ``S`` and adds its share ``N(0, (Z S)^2 / m)`` of
  the noise before masking; the ``m`` shares sum to ``N(0, (Z S)^2)``, so the mean carries ``N(0, (Z S / m)^2)``,
  DP-FedAvg's noise (:mod:`.client_dp`), and the accounted epsilon is the same.  The server no longer sees individual
  clipped updates: the trusted-aggregator assumption becomes "honest clients add their share".  The accounting treats
  the quantised sum as the continuous Gaussian mechanism; stochastic rounding and the clipping range (clipped noise)
  are outside the analysis (Kairouz, Liu & Steinke's distributed discrete Gaussian, ICML 2021, accounts for them;
  privreid does not), and ``k`` colluding clients reduce the noise the others see by their ``k/m`` share.
* ``--beta`` upload noise (Eq. 14) is added by the server to the aggregate it computes from the sum; download noise
  is the client's own; DP-SGD trains the clients' updates before they are masked.  Both compose unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import torch

from privreid.config import RunConfig
from privreid.errors import ConfigError
from privreid.federated.policy import StateDict
from privreid.federated.registry import Method
from privreid.federated.strategy import RoundResult, Strategy, Upload
from privreid.defenses.secure_aggregation.protocol import Parameters, secure_sum
from privreid.seeding import derive_seed
from privreid.defenses.client_dp.mechanism import ClientLevelDP, clip_update, trainable_parameter_names, update_norm

#: what ``summary.json`` states the server could see
SERVER_VIEW = ("per round: the quantised sum of the selected clients' pre-scaled updates (shared floating model "
               "keys), the sum of their weights, for each extra uploaded tensor the sum over its senders and how "
               "many sent it, and the number of values the clipping range saturated; masked vectors, public keys "
               "and encrypted key shares of single clients; which clients took part and which dropped out. "
               "Not an individual update, weight or sample count.")


#: what Flower's SecAgg+ messages add to the server's view
FLOWER_VIEW = (" On Flower, each site's FitRes also carries in the clear its weight (num_examples: its sample "
               "count, public here, or 1), its scalar training metrics and its count of saturated values.")


def round_parameters(config: RunConfig, clients: int, max_weight: float) -> Parameters:
    """The protocol's settings for ``clients`` clients: ``--secagg-*`` where given, else the defaults.

    Defaults: every client of the round holds a share (``shares = m``, Flower's
    ``num_shares=1.0``, i.e. SecAgg's complete graph), and a majority of them
    reconstructs (``threshold = shares // 2 + 1``: fewer cannot, more would
    tolerate fewer dropouts); Flower's clipping (8) and quantisation
    (``2**22``) ranges and modulus (``2**32``).
    """
    p = config.privacy
    shares = clients if p.secagg_shares is None else p.secagg_shares
    threshold = shares // 2 + 1 if p.secagg_threshold is None else p.secagg_threshold
    return Parameters(num_shares=shares, threshold=threshold, clipping_range=p.secagg_clip,
                      quantization_range=p.secagg_quantization, max_weight=max_weight)


def check_secure_aggregation(config: RunConfig, clients_per_round: int) -> None:
    """ConfigError, before anything is written, for settings the protocol cannot run with (see ``Parameters.check``)."""
    p = config.privacy
    if p.secagg_threshold is not None and p.secagg_shares is not None and p.secagg_threshold > p.secagg_shares:
        raise ConfigError(f"--secagg-threshold {p.secagg_threshold} is above --secagg-shares {p.secagg_shares}: "
                          "a secret cannot need more shares than exist")
    if p.secagg_threshold is not None and p.secagg_threshold > clients_per_round:
        raise ConfigError(f"--secure-aggregation: {clients_per_round} clients per round is fewer than the "
                          f"reconstruction threshold {p.secagg_threshold}")
    params = round_parameters(config, clients_per_round, 1.0)
    try:
        params.check(clients_per_round)
    except ConfigError as exc:
        raise ConfigError(f"--secure-aggregation: {exc}") from None


class _TakeAggregate(Strategy):
    """Stands in for DP-FedAvg's server step inside wrappers: the secure sum already is its result."""

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> RoundResult:
        (only,) = uploads
        return RoundResult(dict(only.state))


def _without_client_dp(strategy: Strategy) -> tuple[Strategy, ClientLevelDP | None]:
    if isinstance(strategy, ClientLevelDP):
        return _TakeAggregate(), strategy
    inner = getattr(strategy, "inner", None)
    if inner is None:
        return strategy, None
    replaced, dp = _without_client_dp(inner)
    if dp is None:
        return strategy, None
    outer = copy.copy(strategy)
    outer.inner = replaced
    return outer, dp


class AggregatedUpload(Upload):
    """What a secure-aggregation runtime (privreid's Flower runtime) hands the strategy: one round's sum, done.

    ``state`` is the global state moved by the dequantised weighted mean of the
    updates (:meth:`SecureAggregate.aggregate_state`); ``report`` the round's
    ``secagg`` record.
    """

    def __init__(self, state: StateDict, weight: float, report: dict[str, Any]):
        super().__init__("secure-aggregate", state, weight)  # type: ignore[arg-type]
        self.report = report


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


class SecureAggregate(Strategy):
    """The inner strategy applied to the secure sum of the round's uploads (module docstring).

    Args:
        inner: the method's strategy (after DP and beta noise wrappers).
        model_keys: the model's ``state_dict`` keys (anything else an upload carries is an extra).
        config: the run configuration (``--secagg-*`` settings, client DP).
        trainable: the trainable parameter names (client DP privatises only them).
        drop: clients that go silent after sharing their keys (tests of dropout recovery).
    """

    def __init__(self, inner: Strategy, model_keys: frozenset[str], config: RunConfig,
                 trainable: frozenset[str] = frozenset(), drop: frozenset[str] = frozenset()):
        self.weight = inner.upload_weight()
        self.inner, self.dp = _without_client_dp(inner)
        if self.weight is None:
            raise ConfigError(f"--secure-aggregation: the server strategy {type(inner).__name__} is not a "
                              "weighted mean of the uploads, so it cannot run on their sum")
        self.model_keys, self.config, self.trainable, self.drop = model_keys, config, trainable, drop
        #: ``(B, keys, defense)``: the verified L2 bound of every input on ``keys`` (:meth:`with_input_bound`)
        self.input_bound: tuple[float, frozenset[str], str] | None = None

    def with_input_bound(self, bound: float, keys: frozenset[str], defense: str) -> "SecureAggregate":
        """A copy that sums only inputs whose update has L2 norm at most ``bound`` on ``keys`` (norm-bound under
        secure aggregation): the effect of an input-validation protocol (ACORN, Bell et al., USENIX Security
        2023; RoFL, Lycklama et al., S&P 2023), where each client proves in zero knowledge that its masked input
        meets the bound and the server verifies the proof.  The proofs are not computed; their effect is
        simulated: a client whose update is over the bound (:meth:`within_bound`) enters the sum as a zero
        vector of weight 0 (it is not summed), and the server learns that it failed, nothing else (``defense``'s
        record names the rejected clients).  Under ``--client-dp`` the check is on the update before the
        client's clip and noise share, and a rejected client adds no share of the noise."""
        bounded = copy.copy(self)
        bounded.input_bound = (float(bound), frozenset(keys), defense)
        return bounded

    def within_bound(self, global_state: StateDict, upload: Upload) -> bool:
        """Whether ``upload``'s update meets the verified bound (True without one); runs on the client's side, the
        server learns the one bit a verified proof gives it."""
        if self.input_bound is None:
            return True
        bound, keys, _ = self.input_bound
        return update_norm({k: upload.state[k].double() - global_state[k].double()
                            for k in upload.state if k in keys}) <= bound

    def configure(self, global_state: StateDict, client, client_server_state, round_index: int) -> StateDict:
        return self.inner.configure(global_state, client, client_server_state, round_index)

    def _vector_keys(self, global_state: StateDict, upload: Upload) -> list[str]:
        keys = [k for k in upload.state if k in self.model_keys and torch.is_floating_point(upload.state[k])]
        if self.dp:
            keys = [k for k in keys if k in self.trainable]
        missing = [k for k in keys if k not in global_state]
        if missing:
            raise ValueError(f"uploaded keys missing from the global state: {missing[:3]}")
        return keys

    def client_input(self, global_state: StateDict, upload: Upload, keys: list[str], extra_keys: list[str],
                     extra_like: dict[str, torch.Tensor], m: int, seed: int):
        """What client ``upload.client`` masks: (update vector, weight, extras, indicators); runs on its side."""
        delta = {k: upload.state[k].double() - global_state[k].double() for k in keys}
        if not self.within_bound(global_state, upload):  # rejected by the input check: not summed
            return ([np.zeros(tuple(delta[k].shape)) for k in keys], 0.0,
                    [np.zeros(tuple(extra_like[k].shape)) for k in extra_keys],
                    [np.zeros(len(extra_keys), dtype=np.int64)] if extra_keys else [])
        if self.dp:
            delta = clip_update(delta, self.dp.clip)
            gen = torch.Generator().manual_seed(derive_seed(seed, "dp-share", upload.client))
            share_std = self.dp.noise_multiplier * self.dp.clip / m ** 0.5
            delta = {k: v + share_std * torch.randn(v.shape, generator=gen, dtype=torch.float64)
                     for k, v in delta.items()}
        extras = [_numpy(upload.state[k]) if k in upload.state else np.zeros(tuple(extra_like[k].shape))
                  for k in extra_keys]
        indicators = [np.array([k in upload.state for k in extra_keys], dtype=np.int64)] if extra_keys else []
        return [_numpy(delta[k]) for k in keys], float(self.weight(upload)), extras, indicators

    def aggregate_state(self, global_state: StateDict, keys: list[str], mean: list[np.ndarray]) -> StateDict:
        """The model keys of ``global_state`` with ``mean`` (the weighted mean update of ``keys``) added.

        The model keys outside the vector (integer buffers; untrainable ones
        under client DP) keep the server's values.
        """
        state: StateDict = {k: v for k, v in global_state.items() if k in self.model_keys}
        for k, update in zip(keys, mean):
            g = global_state[k]
            state[k] = (g.double() + torch.from_numpy(np.asarray(update, dtype=np.float64)).to(g.device)).to(g.dtype)
        return state

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> RoundResult:
        if not uploads:
            raise ValueError("cannot aggregate zero uploads")
        if len(uploads) == 1 and isinstance(uploads[0], AggregatedUpload):  # summed by the runtime already
            return _reported(self.inner.aggregate(global_state, uploads), uploads[0].report)
        keys = self._vector_keys(global_state, uploads[0])
        for u in uploads[1:]:
            if self._vector_keys(global_state, u) != keys:
                raise ValueError(f"client {u.client} uploaded a different set of model keys")
        extra_like: dict[str, torch.Tensor] = {}
        for u in uploads:  # the extras' key space: public in a deployment (DPPT: the federation's identities)
            extra_like.update({k: v for k, v in u.state.items() if k not in self.model_keys})
        extra_keys = sorted(extra_like)
        m = len(uploads)
        seed = int(torch.randint(0, 2**62, (1,)))  # the engine seeds the server's RNG per round
        max_weight = self.config.privacy.secagg_max_weight or max(float(self.weight(u)) for u in uploads)
        params = round_parameters(self.config, m, 1.0 if self.dp else max_weight)
        inputs = {u.client: self.client_input(global_state, u, keys, extra_keys, extra_like, m, seed)
                  for u in uploads}
        rejected = [u.client for u in uploads if not self.within_bound(global_state, u)]
        if len(rejected) == m:  # nothing to sum: the round keeps the global model
            empty = {"scope": "secagg", "clients": m, "dropped": [], "saturated": 0, "values": 0,
                     "saturated_fraction": 0.0, "quantisation_error_bound": 0.0, "rejected": rejected}
            return RoundResult(dict(global_state), records=[empty, self._input_record(uploads, rejected)])
        result = secure_sum(inputs, params, seed=seed, dropped=self.drop)
        # extras nobody sent are absent (the inner strategy keeps what it had)
        state = self.aggregate_state(global_state, keys, result.mean)
        counts = result.extra_count[0] if extra_keys else []
        for k, total, count in zip(extra_keys, result.extra_sum, counts):
            if count > 0:
                state[k] = torch.from_numpy(total / int(count)).to(extra_like[k].dtype)
        report = {"scope": "secagg", "clients": len(result.survivors), "dropped": result.dropped,
                  "saturated": result.saturated, "values": result.values,
                  "saturated_fraction": result.saturated / max(result.values, 1),
                  "quantisation_error_bound": result.error_bound,
                  "masked_bytes_per_client": result.masked_bytes, "protocol_bytes_up": result.protocol_bytes_up,
                  "protocol_bytes_down": result.protocol_bytes_down, "total_weight": result.total_weight}
        aggregate = Upload("secure-aggregate", state, result.total_weight)  # type: ignore[arg-type]
        if self.input_bound is None:
            return _reported(self.inner.aggregate(global_state, [aggregate]), report)
        report["rejected"] = rejected
        reported = _reported(self.inner.aggregate(global_state, [aggregate]), report)
        return dataclasses.replace(reported, records=[*reported.records, self._input_record(uploads, rejected)])

    def _input_record(self, uploads: list[Upload], rejected: list[str]) -> dict[str, Any]:
        """The bounding defense's detection record: which inputs failed the verified bound."""
        return {"scope": "defense", "defense": self.input_bound[2],
                "accepted": [u.client for u in uploads if u.client not in rejected], "rejected": list(rejected)}


def _reported(result: RoundResult, report: dict[str, Any]) -> RoundResult:
    """``result`` with the round's ``secagg`` record (what the protocol saw, saturation included) first."""
    return dataclasses.replace(result, records=[dict(report), *result.records])


def with_secure_aggregation(method: Method) -> Method:
    """``method`` with :class:`SecureAggregate`; ConfigError for methods whose strategy needs per-client uploads."""
    if not method.communicates or not method.has_global_model:
        raise ConfigError(f"--secure-aggregation needs a federated method; {method.name!r} shares no model "
                          "between clients")
    if method.needs_per_client_uploads is not False:
        why = ("its server reads every client's upload on its own" if method.needs_per_client_uploads
               else "it does not declare whether its server needs per-client uploads")
        raise ConfigError(f"--secure-aggregation: method {method.name!r} cannot run on the sum of the uploads: "
                          f"{why} (see `privreid methods`)")
    make_strategy = method.make_strategy

    def strategy(config: RunConfig, model_config: dict[str, Any]) -> Strategy:
        with torch.random.fork_rng(devices=[]):
            model = method.build_model(config, initial_weights=False)
        keys = frozenset(model.state_dict())
        trainable = trainable_parameter_names(method, config) if config.privacy.client_dp else frozenset()
        return SecureAggregate(make_strategy(config, model_config), keys, config, trainable)

    return dataclasses.replace(method, make_strategy=strategy)


def statement(metrics: list[dict[str, Any]], config: RunConfig) -> dict[str, Any]:
    """The ``secure_aggregation`` entry of ``summary.json``: settings, what the server saw, saturation."""
    rounds = [r for r in metrics if r.get("scope") == "secagg"]
    saturated = sum(r["saturated"] for r in rounds)
    values = sum(r["values"] for r in rounds)
    flower = any(r.get("runtime") == "flower" for r in rounds)
    return {"protocol": ("SecAgg+ (Bell et al. 2020): Flower's secaggplus_mod and SecAggPlusWorkflow" if flower else
                         "SecAgg+ (Bell et al. 2020) on Flower's primitives, in-process"),
            "server_view": SERVER_VIEW + (FLOWER_VIEW if flower else "") + (
                " Which clients' inputs failed the verified norm bound." if any("rejected" in r for r in rounds)
                else ""),
            "shares": config.privacy.secagg_shares or "clients per round",
            "threshold": config.privacy.secagg_threshold or "shares // 2 + 1",
            "clipping_range": config.privacy.secagg_clip, "quantization_range": config.privacy.secagg_quantization,
            "max_weight": config.privacy.secagg_max_weight or "largest client weight of the round",
            "distributed_dp": bool(config.privacy.client_dp),
            "saturated_values": saturated, "saturated_fraction": saturated / values if values else 0.0,
            "max_quantisation_error_bound": max((r["quantisation_error_bound"] for r in rounds), default=0.0)}
