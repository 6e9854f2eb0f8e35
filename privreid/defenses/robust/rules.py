"""Byzantine-robust server aggregation and server-side norm bounding (issue 30).

Two mechanisms a server can run against its own poisoned clients:

* :class:`RobustAggregate` replaces a method's plain mean of the uploads
  (FedPav / FedAvg's data-volume mean, FedReID's uniform mean) by a
  Byzantine-robust rule, on Flower's own functions
  (``flwr.server.strategy.aggregate``): Krum / Multi-Krum (Blanchard et al.
  2017), the coordinate-wise median and trimmed mean (Yin et al. 2018) and
  Bulyan (El Mhamdi et al. 2018).  The rules run on every floating tensor of
  the uploads (the model's parameters and BatchNorm's running statistics);
  integer buffers are the heaviest upload's, as in the plain mean
  (:class:`~privreid.federated.strategy.WeightedSum`).  A robust rule needs
  every upload at once, so it keeps the round's uploads
  (:class:`~privreid.federated.strategy.KeepUploads`).
* :class:`BoundedNorm` clips each client's update ``theta_k - theta`` on the
  trainable parameters to an L2 bound before the inner strategy sees it
  (norm bounding, Sun et al. 2019, "Can you really backdoor federated
  learning?"), and with ``noise > 0`` adds ``N(0, noise^2)`` to the
  aggregate's trainable parameters (their "weak DP": no accounted epsilon).
  It streams when the inner strategy does, and wraps any inner strategy,
  client-level DP's included (whose own clip then applies on top).

Both read each client's update on its own: under ``--secure-aggregation``
the server sees only the sum, so they are refused with it
(:mod:`privreid.defenses.robust.plugin`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

import numpy as np
import torch

from privreid.errors import ConfigError
from privreid.federated.policy import StateDict
from privreid.federated.strategy import Accumulator, DataVolumeAverage, RoundResult, Strategy, UniformAverage, Upload
from privreid.defenses.beta_noise.mechanism import add_white_noise
from privreid.defenses.client_dp.mechanism import clip_update

#: ``[(arrays, num_samples), ...] -> arrays``: Flower's signature of an aggregation rule
Rule = Callable[[list[tuple[list[np.ndarray], int]]], list[np.ndarray]]

#: the plain means a robust rule may replace
REPLACEABLE = (DataVolumeAverage, UniformAverage)


def krum_rule(f: int, keep: int) -> Rule:
    """Krum (``keep`` 0: the upload with the smallest sum of squared distances to its ``n - f - 2`` nearest) or
    Multi-Krum (the plain, unweighted mean of the ``keep`` best-scored uploads, as Blanchard et al. 2017 define
    it: the sample counts clients report are theirs to lie about, so they weigh nothing here; Flower's
    ``aggregate_krum`` weighs them, so it is given a count of 1 for every upload)."""
    from flwr.server.strategy.aggregate import aggregate_krum

    return lambda results: aggregate_krum([(arrays, 1) for arrays, _ in results], num_malicious=f, to_keep=keep)


def median_rule() -> Rule:
    """The coordinate-wise median of the uploads (unweighted)."""
    from flwr.server.strategy.aggregate import aggregate_median

    return aggregate_median


def trimmed_mean_rule(fraction: float) -> Rule:
    """The coordinate-wise mean after dropping the ``int(fraction * n)`` largest and smallest values (unweighted)."""
    from flwr.server.strategy.aggregate import aggregate_trimmed_avg

    return lambda results: aggregate_trimmed_avg(results, proportiontocut=fraction)


def bulyan_rule(f: int) -> Rule:
    """Bulyan: ``n - 2f`` uploads chosen by repeated Krum, then the mean of the ``n - 4f`` values closest to
    their coordinate-wise median."""
    from flwr.server.strategy.aggregate import aggregate_bulyan, aggregate_krum

    return lambda results: aggregate_bulyan(list(results), num_malicious=f, aggregation_rule=aggregate_krum,
                                            to_keep=0)


class RobustAggregate(Strategy):
    """A Byzantine-robust ``rule`` over the floating tensors of the round's uploads (see the module docstring).

    Computed in float64 and cast back to each tensor's dtype; what clients
    receive is the global state.  ``check(n)`` raises :class:`ConfigError`
    (one line) when the rule cannot run on the ``n`` uploads a round
    actually aggregates; it is called on every round, before the rule.
    """

    def __init__(self, rule: Rule, check: Callable[[int], None] = lambda n: None):
        self.rule, self.check = rule, check

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> RoundResult:
        if not uploads:
            raise ValueError("cannot aggregate zero uploads")
        self.check(len(uploads))
        first = uploads[0].state
        for up in uploads[1:]:
            if up.state.keys() != first.keys():
                raise ValueError(f"client {up.client} uploaded a different set of keys")
        floating = [k for k, v in first.items() if torch.is_floating_point(v)]
        results = [([up.state[k].detach().to("cpu", torch.float64).numpy() for k in floating], up.num_samples)
                   for up in uploads]
        arrays = self.rule(results)
        out: StateDict = {k: torch.as_tensor(np.asarray(a, dtype=np.float64)).to(first[k].device, first[k].dtype)
                          for k, a in zip(floating, arrays)}
        heaviest = max(uploads, key=lambda up: up.num_samples)  # the first one on ties, as WeightedSum
        out.update({k: v.clone() for k, v in heaviest.state.items() if k not in out})
        return RoundResult(out)


def replace_plain_mean(inner: Strategy, rule: Rule, name: str, method_name: str,
                       check: Callable[[int], None] = lambda n: None) -> RobustAggregate:
    """``RobustAggregate(rule, check)`` in place of ``inner``; ConfigError where ``inner`` is not a plain mean."""
    if type(inner) not in REPLACEABLE:
        raise ConfigError(f"defense {name!r} replaces a plain mean of the uploads; {method_name!r} aggregates with "
                          f"{type(inner).__name__} here, whose weights, clusters or noise a robust rule would drop")
    return RobustAggregate(rule, check)


class BoundedNorm(Strategy):
    """Each upload's update clipped to ``bound`` on ``parameters`` before ``inner`` sees it; ``noise`` std of
    Gaussian noise on the aggregate's ``parameters`` (0: none).  Other keys pass through unchanged."""

    def __init__(self, inner: Strategy, bound: float, noise: float, parameters: Collection[str]):
        self.inner, self.bound, self.noise, self.parameters = inner, float(bound), float(noise), frozenset(parameters)

    def configure(self, global_state, client, client_server_state, round_index):
        return self.inner.configure(global_state, client, client_server_state, round_index)

    def accumulator(self, global_state: StateDict) -> Accumulator:
        return _Bounded(self, global_state, self.inner.accumulator(global_state))


class _Bounded(Accumulator):
    def __init__(self, strategy: BoundedNorm, global_state: StateDict, inner: Accumulator):
        self.strategy, self.global_state, self.inner = strategy, global_state, inner
        self.keys = [k for k in global_state if k in strategy.parameters]

    def add(self, upload: Upload) -> None:
        g, state = self.global_state, upload.state
        clipped = clip_update({k: state[k].double() - g[k].double() for k in self.keys}, self.strategy.bound)
        bounded = {**state, **{k: (g[k].double() + clipped[k]).to(state[k].dtype) for k in self.keys}}
        self.inner.add(Upload(upload.client, bounded, upload.num_samples, upload.metrics, upload.reports))

    def result(self) -> RoundResult:
        result = self.inner.result()
        if self.strategy.noise <= 0:
            return result
        noisy = add_white_noise(result.global_state, self.strategy.noise, self.strategy.parameters)
        return dataclasses.replace(result, global_state=noisy)
