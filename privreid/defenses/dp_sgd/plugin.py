"""``--dp-sgd``: record-level DP-SGD on every client (the mechanism: :mod:`privreid.defenses.dp_sgd.mechanism`)."""

from __future__ import annotations

from typing import Any

from privreid.config import RunConfig, dp_delta, dp_max_grad_norm
from privreid.errors import ConfigError
from privreid.defenses.budget import check_first_round, exceeds, latest_privacy_records
from privreid.defenses.registry import Defense, DefenseLedger, register

SCOPE = (
    "record-level (epsilon_k, delta)-DP for each client k's training images (add/remove one image), "
    "covering everything derived from its DP-SGD-trained parameters: its uploads in every round and what "
    "the server computes from them. Not covered: the scalar training metrics privreid records (loss, "
    "samples seen); client dataset sizes are treated as public. Poisson sampling replaces the method's "
    "batch sampler; losses that couple samples (triplet, circle) and updates that train tensors outside "
    "the model are refused. Noise from the seeded torch RNG (reproducible, not cryptographically secure).")
NORM_NOTE = ("DP-SGD: every BatchNorm layer is replaced by a freshly initialised GroupNorm "
             "(32 groups on feature maps, 1 on embeddings): batch statistics have no "
             "per-sample gradients")

def epsilon_after(plan, reported: dict | None, delta: float) -> float:
    """A client's epsilon after one more round of ``plan`` on top of the history it ``reported``."""
    from privreid.defenses.accounting import ClientAccountant
    from privreid.defenses.dp_sgd.mechanism import HISTORY_KEY

    accountant = ClientAccountant.from_memory(reported or {}, HISTORY_KEY)
    return accountant.epsilon_after(plan.noise_multiplier, plan.sample_rate, plan.steps_per_round, delta)


class DPSGDLedger(DefenseLedger):
    """Per-client RDP accounting: epsilon after every round, the budget, the statement.

    The ledger's record of a client is what the client last reported in
    ``Upload.reports`` (its accountant history and noise multiplier,
    :data:`~privreid.defenses.dp_sgd.mechanism.HISTORY_KEY` and ``NOISE_KEY``); it never
    reads client memory.  The engine checkpoints the record (:meth:`state_dict`).
    """

    def __init__(self, config: RunConfig, clients):
        super().__init__()
        self.config, self.clients, self.delta = config, clients, dp_delta(config)
        self.notes.append(NORM_NOTE)
        #: client name -> its latest ``Upload.reports`` entries of DP-SGD
        self.reported: dict[str, dict[str, Any]] = {}

    @staticmethod
    def _keys() -> tuple[str, ...]:
        from privreid.defenses.dp_sgd.mechanism import HISTORY_KEY, NOISE_KEY

        return (HISTORY_KEY, NOISE_KEY)

    def on_upload(self, upload) -> None:
        entries = {k: upload.reports[k] for k in self._keys() if k in upload.reports}
        if entries:
            self.reported[upload.client] = entries

    def state_dict(self) -> dict[str, Any]:
        return {"reported": {name: dict(entries) for name, entries in self.reported.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reported = {name: dict(entries) for name, entries in state.get("reported", {}).items()}

    def before_round(self, round_index, selected) -> str | None:
        from privreid.defenses.dp_sgd.mechanism import plan_for

        if self.config.privacy.target_epsilon is None:
            return None
        for c in selected:
            reported = self.reported.get(c.name)
            eps = epsilon_after(plan_for(self.config, c.num_samples, reported), reported, self.delta)
            if exceeds(self.config, eps):
                return (f"privacy budget: client {c.name} would reach epsilon {eps:.4g} > target "
                        f"{self.config.privacy.target_epsilon:g} in round {round_index + 1}; training stops after round "
                        f"{round_index} (its checkpoint is the result)")
        return None

    def after_round(self, round_no) -> list[dict[str, Any]]:
        from privreid.defenses.accounting import ClientAccountant
        from privreid.defenses.dp_sgd.mechanism import HISTORY_KEY, plan_for

        records = []
        for c in self.clients:
            reported = self.reported.get(c.name, {})
            if HISTORY_KEY not in reported:  # not trained yet
                continue
            plan = plan_for(self.config, c.num_samples, reported)
            accountant = ClientAccountant.from_memory(reported, HISTORY_KEY)
            records.append({"round": round_no, "scope": "privacy", "level": "record", "client": c.name,
                            "epsilon": accountant.epsilon(self.delta), "delta": self.delta,
                            "noise_multiplier": plan.noise_multiplier, "sample_rate": plan.sample_rate,
                            "steps": accountant.steps})
        return records

    def statement(self, out, metrics) -> None:
        latest = latest_privacy_records(metrics)
        out.update({"defense": "DP-SGD (Opacus, per-sample clipping and Gaussian noise on every client)",
                    "level": "record", "accountant": "Opacus RDP", "delta": self.delta,
                    "max_grad_norm": dp_max_grad_norm(self.config), "target_epsilon": self.config.privacy.target_epsilon,
                    "epsilon": max((r["epsilon"] for r in latest.values()), default=0.0),
                    "epsilon_per_client": {k: r["epsilon"] for k, r in sorted(latest.items())},
                    "noise_multiplier_per_client": {k: r["noise_multiplier"] for k, r in sorted(latest.items())},
                    "guarantee": SCOPE})


class DPSGD(Defense):
    name = "dp-sgd"
    flag = "--dp-sgd"
    summary = "record-level DP-SGD on every client (Opacus; per-sample clipping and Gaussian noise)"
    order = 10
    example_settings = {"dp_sgd": True, "noise_multiplier": 1.0}

    def enabled(self, config: RunConfig) -> bool:
        return config.privacy.dp_sgd

    def check(self, config, clients, clients_per_round) -> None:
        """``delta < 1/N`` for every client's N images; a target epsilon the first round does not exceed."""
        from privreid.defenses.dp_sgd.mechanism import plan_for

        plans = {c.name: plan_for(config, c.num_samples) for c in clients}
        if config.privacy.target_epsilon is not None:
            delta = dp_delta(config)
            check_first_round(config, {name: epsilon_after(p, None, delta) for name, p in plans.items()})

    def wrap(self, method, config):
        """The method under DP-SGD; ConfigError for a method that does not declare support (``Method.dp_sgd_support``)."""
        from privreid.defenses.dp_sgd.mechanism import with_dp_sgd

        support = self.supports(method)
        if not support.startswith("yes"):
            raise ConfigError(f"--dp-sgd cannot train method {method.name!r}: {support.partition('(')[2][:-1]}")

        # BatchNorm has no per-sample gradients (NORM_NOTE): the model transform group_norm
        return with_dp_sgd(method).adding_model_transforms("group_norm")

    def ledger(self, config, clients, clients_per_round) -> DPSGDLedger:
        return DPSGDLedger(config, clients)

    def threat_assumption(self, config, aggregated=None) -> dict[str, Any]:
        """The per-sample bound C and ``--noise-multiplier``, on every client's step before anything leaves it.

        With the noise derived from ``--target-epsilon`` (no multiplier in
        the config) the per-client value lives in the checkpoint's client
        memory: the attack then sees the clipped gradient without noise, an
        upper bound on leakage.
        """
        return {"clip_norm": float(dp_max_grad_norm(config)),
                "noise_multiplier": float(config.privacy.noise_multiplier or 0.0)}

    def supports(self, method) -> str:
        """The method's own declaration (``Method.dp_sgd_support``); undeclared methods are refused."""
        return method.dp_sgd_support or "no (it does not declare dp_sgd_support)"

    def server_memory_keys(self, config) -> tuple[str, ...]:
        from privreid.defenses.dp_sgd.mechanism import HISTORY_KEY, NOISE_KEY  # imports Opacus: only when DP-SGD is on

        return (HISTORY_KEY, NOISE_KEY)


register(DPSGD())
