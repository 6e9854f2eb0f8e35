"""Defences: wrappers around a method's client update, server strategy and download.

Methods never import defences; :func:`apply_defenses` composes them from the
run configuration, so every method gets them:

* record-level DP-SGD on every client (:mod:`.dp_sgd`, ``--dp-sgd``);
* client-level DP, DP-FedAvg (:mod:`.client_dp`, ``--client-dp``);
* FedReID's beta white noise (:mod:`.beta_noise`, ``--beta``,
  ``--beta-mode``), no formal guarantee: on the server's aggregate (upload,
  Eq. 14) and/or on the model each client starts training from (download,
  Eq. 15), trainable parameters only; buffers (BatchNorm statistics) are
  transmitted noise-free.

:class:`PrivacyLedger` is the engine's view of the run's privacy: it checks
the privacy settings against the federation before anything is written,
logs epsilon after every round (``scope: "privacy"`` records in
``metrics.jsonl``), stops training before a ``--target-epsilon`` budget would
be exceeded, and writes the ``privacy`` statement of ``summary.json``.
The differential-privacy modules import Opacus, so they are imported only
when a run asks for them.
"""

from __future__ import annotations

from typing import Any

from ..config import RunConfig, dp_delta, dp_max_grad_norm
from ..data.types import ClientData
from ..dependencies import require
from ..errors import ConfigError
from ..federated.registry import Method
from .beta_noise import with_beta_noise

#: relative slack of the budget check (float noise of summing RDP over rows)
BUDGET_SLACK = 1e-9

DP_SGD_SCOPE = (
    "record-level (epsilon_k, delta)-DP for each client k's training images (add/remove one image), "
    "covering everything derived from its DP-SGD-trained parameters: its uploads in every round and what "
    "the server computes from them. Not covered: the scalar training metrics privreid records (loss, "
    "samples seen); client dataset sizes are treated as public. Poisson sampling replaces the method's "
    "batch sampler; losses that couple samples (triplet, circle) and updates that train tensors outside "
    "the model are refused. Noise from the seeded torch RNG (reproducible, not cryptographically secure).")
CLIENT_DP_SCOPE = (
    "client-level (epsilon, delta)-DP (add/remove one client's whole data) for the sequence of global models "
    "the server releases, with a trusted aggregator (the server sees individual clipped updates). Accounted "
    "as Poisson sampling with q = m/N although exactly m clients are sampled per round (the DP-FedAvg "
    "approximation). Not covered: the clients' local models and the scalar metrics they report. Noise from "
    "the seeded torch RNG (reproducible, not cryptographically secure).")


def apply_defenses(method: Method, config: RunConfig) -> Method:
    """``method`` with the defences the configuration asks for (DP first; beta noise on top)."""
    t = config.train
    if t.dp_sgd:
        from .dp_sgd import with_dp_sgd

        method = with_dp_sgd(method)
    if t.client_dp:
        from .client_dp import with_client_dp

        method = with_client_dp(method)
    if t.beta > 0:
        method = with_beta_noise(method, t.beta, t.beta_mode)
    if t.secure_aggregation:  # outermost: the strategies above run on the secure sum
        require("flwr", "--secure-aggregation (SecAgg+ on Flower's primitives)")
        from .secure_aggregation import with_secure_aggregation

        method = with_secure_aggregation(method)
    return method


class PrivacyLedger:
    """Checks, logs, budgets and states the formal privacy of one run (see the module docstring).

    Args:
        config: the run configuration.
        clients: the clients that train (after ``prepare_clients``).
        clients_per_round: ``m``, the clients sampled every round.

    Raises ConfigError for ``delta >= 1/N`` (N: a client's images for DP-SGD,
    the number of clients for client DP), an unreachable target epsilon, or
    a target that the first round already exceeds.
    """

    def __init__(self, config: RunConfig, clients: list[ClientData], clients_per_round: int):
        self.config, self.clients = config, clients
        t = config.train
        self.delta = dp_delta(config)
        self.notes: list[str] = []
        if t.secure_aggregation:
            require("flwr", "--secure-aggregation (SecAgg+ on Flower's primitives)")
            from .secure_aggregation import check_secure_aggregation

            check_secure_aggregation(config, clients_per_round)
        if t.dp_sgd:
            from .dp_sgd import plan_for

            plans = {c.name: plan_for(config, c.num_samples) for c in clients}
            self.notes.append("DP-SGD: every BatchNorm layer is replaced by a freshly initialised GroupNorm "
                              "(32 groups on feature maps, 1 on embeddings): batch statistics have no "
                              "per-sample gradients")
            if t.target_epsilon is not None:
                self._check_first_round({name: self._dp_sgd_epsilon_after(p, None) for name, p in plans.items()})
        elif t.client_dp:
            n = len(clients)
            if self.delta >= 1.0 / n:
                raise ConfigError(f"--delta {self.delta:g} must be below 1/N = {1.0 / n:.3g} for N = {n} clients "
                                  "(delta >= 1/N allows publishing one client's data outright)")
            from .client_dp import PRIVATISED_NOTE

            self.sample_rate = clients_per_round / n
            self.notes.append(PRIVATISED_NOTE)
            self.notes.append("client-level DP: the server averages clipped updates with uniform weights "
                              "(DP-FedAvg), replacing data-volume weights where the method uses them; noise std "
                              f"per trainable parameter Z*S/m = {t.noise_multiplier * t.clip / clients_per_round:.3g}")
            if t.target_epsilon is not None:
                self._check_first_round({"server": self._client_dp_epsilon(1)})

    # -- accounting ------------------------------------------------------------
    def _dp_sgd_epsilon_after(self, plan, memory: dict | None) -> float:
        from .accounting import ClientAccountant
        from .dp_sgd import HISTORY_KEY

        accountant = ClientAccountant.from_memory(memory or {}, HISTORY_KEY)
        return accountant.epsilon_after(plan.noise_multiplier, plan.sample_rate, plan.steps_per_round, self.delta)

    def _client_dp_epsilon(self, rounds: int) -> float:
        from .accounting import epsilon

        return epsilon(self.sample_rate, self.config.train.noise_multiplier, rounds, self.delta) if rounds else 0.0

    def _exceeds(self, eps: float) -> bool:
        target = self.config.train.target_epsilon
        return target is not None and eps > target * (1 + BUDGET_SLACK)

    def _check_first_round(self, first: dict[str, float]) -> None:
        over = {k: e for k, e in first.items() if self._exceeds(e)}
        if over:
            name, eps = max(over.items(), key=lambda kv: kv[1])
            raise ConfigError(f"--target-epsilon {self.config.train.target_epsilon:g} is exceeded by the first "
                              f"round already ({name}: epsilon {eps:.3g}); raise the target, the noise "
                              f"multiplier or the delta, or lower the steps per round")

    # -- engine hooks ----------------------------------------------------------
    def stop_reason(self, round_index: int, selected: list[ClientData], memories: dict[str, dict]) -> str | None:
        """Why round ``round_index`` (0-based) must not run: the message, or None if it stays within budget."""
        t = self.config.train
        if t.target_epsilon is None:
            return None
        if t.dp_sgd:
            from .dp_sgd import plan_for

            for c in selected:
                memory = memories.get(c.name)
                eps = self._dp_sgd_epsilon_after(plan_for(self.config, c.num_samples, memory), memory)
                if self._exceeds(eps):
                    return (f"privacy budget: client {c.name} would reach epsilon {eps:.4g} > target "
                            f"{t.target_epsilon:g} in round {round_index + 1}; training stops after round "
                            f"{round_index} (its checkpoint is the result)")
        elif t.client_dp:
            eps = self._client_dp_epsilon(round_index + 1)
            if self._exceeds(eps):
                return (f"privacy budget: epsilon would reach {eps:.4g} > target {t.target_epsilon:g} in round "
                        f"{round_index + 1}; training stops after round {round_index} (its checkpoint is the result)")
        return None

    def round_records(self, round_no: int, memories: dict[str, dict]) -> list[dict[str, Any]]:
        """``metrics.jsonl`` records of the epsilon spent after round ``round_no`` (1-based)."""
        t = self.config.train
        if t.dp_sgd:
            from .accounting import ClientAccountant
            from .dp_sgd import HISTORY_KEY, plan_for

            records = []
            for c in self.clients:
                memory = memories.get(c.name, {})
                if HISTORY_KEY not in memory:  # not trained yet
                    continue
                plan = plan_for(self.config, c.num_samples, memory)
                accountant = ClientAccountant.from_memory(memory, HISTORY_KEY)
                records.append({"round": round_no, "scope": "privacy", "level": "record", "client": c.name,
                                "epsilon": accountant.epsilon(self.delta), "delta": self.delta,
                                "noise_multiplier": plan.noise_multiplier, "sample_rate": plan.sample_rate,
                                "steps": accountant.steps})
            return records
        if t.client_dp:
            return [{"round": round_no, "scope": "privacy", "level": "client",
                     "epsilon": self._client_dp_epsilon(round_no), "delta": self.delta,
                     "noise_multiplier": t.noise_multiplier, "sample_rate": self.sample_rate, "steps": round_no}]
        return []

    def statement(self, metrics: list[dict[str, Any]], stopped: str | None = None) -> dict[str, Any]:
        """The ``privacy`` entry of ``summary.json``: mechanism, epsilon spent, what it covers."""
        t = self.config.train
        latest: dict[str, dict] = {}
        for rec in metrics:
            if rec.get("scope") == "privacy":
                latest[rec.get("client", "server")] = rec
        out: dict[str, Any] = {"notes": list(self.notes), "stopped": stopped}
        if t.dp_sgd:
            out.update({"defense": "DP-SGD (Opacus, per-sample clipping and Gaussian noise on every client)",
                        "level": "record", "accountant": "Opacus RDP", "delta": self.delta,
                        "max_grad_norm": dp_max_grad_norm(self.config), "target_epsilon": t.target_epsilon,
                        "epsilon": max((r["epsilon"] for r in latest.values()), default=0.0),
                        "epsilon_per_client": {k: r["epsilon"] for k, r in sorted(latest.items())},
                        "noise_multiplier_per_client": {k: r["noise_multiplier"] for k, r in sorted(latest.items())},
                        "guarantee": DP_SGD_SCOPE})
        elif t.client_dp:
            out.update({"defense": "client-level DP (DP-FedAvg: clipped updates, uniform mean, Gaussian noise)",
                        "level": "client", "accountant": "Opacus RDP", "delta": self.delta, "clip": t.clip,
                        "noise_multiplier": t.noise_multiplier, "sample_rate": self.sample_rate,
                        "target_epsilon": t.target_epsilon,
                        "epsilon": latest["server"]["epsilon"] if "server" in latest else 0.0,
                        "guarantee": CLIENT_DP_SCOPE})
        else:
            out.update({"defense": None, "epsilon": None, "guarantee": "none"})
        if t.beta > 0:
            out["beta"] = {"mode": t.beta_mode, "scale": t.beta}
            if out["defense"] is None:
                out.update({"defense": f"beta white noise ({t.beta_mode})", "guarantee":
                            "none: beta noise without clipping has no formal differential-privacy guarantee"})
            else:
                out["notes"].append("beta white noise is added on top; it claims no extra guarantee")
        out["secure_aggregation"] = None
        if t.secure_aggregation:
            from .secure_aggregation import statement

            out["secure_aggregation"] = statement(metrics, self.config)
        out["server_view"] = (out["secure_aggregation"]["server_view"] if t.secure_aggregation else
                              "every selected client's upload (shared keys, sample count, metrics) in the clear")
        return out


__all__ = ["PrivacyLedger", "apply_defenses", "with_beta_noise"]
