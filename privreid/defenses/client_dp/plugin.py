"""``--client-dp``: client-level DP, DP-FedAvg (the mechanism: :mod:`privreid.defenses.client_dp.mechanism`)."""

from __future__ import annotations

from typing import Any

from privreid.config import FederationConfig, RunConfig, dp_delta
from privreid.errors import ConfigError
from privreid.defenses.budget import check_first_round, exceeds, latest_privacy_records
from privreid.defenses.registry import Defense, DefenseLedger, register

SCOPE = (
    "client-level (epsilon, delta)-DP (add/remove one client's whole data) for the sequence of global models "
    "the server releases, with a trusted aggregator (the server sees individual clipped updates). Accounted "
    "as Poisson sampling with q = m/N although exactly m clients are sampled per round (the DP-FedAvg "
    "approximation). Not covered: the clients' local models and the scalar metrics they report. Noise from "
    "the seeded torch RNG (reproducible, not cryptographically secure).")


def epsilon(config: RunConfig, sample_rate: float, rounds: int) -> float:
    """The RDP epsilon of the server's releases after ``rounds`` rounds at ``q = sample_rate``."""
    from privreid.defenses.accounting import epsilon as rdp_epsilon

    return rdp_epsilon(sample_rate, config.privacy.noise_multiplier, rounds, dp_delta(config)) if rounds else 0.0


class ClientDPLedger(DefenseLedger):
    """Server-side RDP accounting of the released global models (Poisson, ``q = m / N``)."""

    def __init__(self, config: RunConfig, clients, clients_per_round: int):
        from privreid.defenses.client_dp.mechanism import PRIVATISED_NOTE

        super().__init__()
        self.config, self.delta = config, dp_delta(config)
        self.sample_rate = clients_per_round / len(clients)
        self.notes.append(PRIVATISED_NOTE)
        self.notes.append("client-level DP: the server averages clipped updates with uniform weights "
                          "(DP-FedAvg), replacing data-volume weights where the method uses them; noise std "
                          f"per trainable parameter Z*S/m = "
                          f"{config.privacy.noise_multiplier * config.privacy.clip / clients_per_round:.3g}")

    def before_round(self, round_index, selected) -> str | None:
        if self.config.privacy.target_epsilon is None:
            return None
        eps = epsilon(self.config, self.sample_rate, round_index + 1)
        if exceeds(self.config, eps):
            return (f"privacy budget: epsilon would reach {eps:.4g} > target {self.config.privacy.target_epsilon:g} in round "
                    f"{round_index + 1}; training stops after round {round_index} (its checkpoint is the result)")
        return None

    def after_round(self, round_no) -> list[dict[str, Any]]:
        return [{"round": round_no, "scope": "privacy", "level": "client",
                 "epsilon": epsilon(self.config, self.sample_rate, round_no), "delta": self.delta,
                 "noise_multiplier": self.config.privacy.noise_multiplier, "sample_rate": self.sample_rate, "steps": round_no}]

    def statement(self, out, metrics) -> None:
        latest = latest_privacy_records(metrics)
        out.update({"defense": "client-level DP (DP-FedAvg: clipped updates, uniform mean, Gaussian noise)",
                    "level": "client", "accountant": "Opacus RDP", "delta": self.delta, "clip": self.config.privacy.clip,
                    "noise_multiplier": self.config.privacy.noise_multiplier, "sample_rate": self.sample_rate,
                    "target_epsilon": self.config.privacy.target_epsilon,
                    "epsilon": latest["server"]["epsilon"] if "server" in latest else 0.0,
                    "guarantee": SCOPE})


class ClientDP(Defense):
    name = "client-dp"
    flag = "--client-dp"
    summary = "client-level DP (DP-FedAvg): clipped client updates, uniform mean, Gaussian noise at the server"
    order = 20
    example_settings = {"client_dp": True, "clip": 1.0, "noise_multiplier": 1.0}

    def enabled(self, config: RunConfig) -> bool:
        return config.privacy.client_dp

    def check(self, config, clients, clients_per_round) -> None:
        """``delta < 1/N`` for N clients; a target epsilon the first round does not exceed."""
        n, delta = len(clients), dp_delta(config)
        if delta >= 1.0 / n:
            raise ConfigError(f"--delta {delta:g} must be below 1/N = {1.0 / n:.3g} for N = {n} clients "
                              "(delta >= 1/N allows publishing one client's data outright)")
        if config.privacy.target_epsilon is not None:
            check_first_round(config, {"server": epsilon(config, clients_per_round / n, 1)})

    def wrap(self, method, config):
        from privreid.defenses.client_dp.mechanism import with_client_dp

        return with_client_dp(method)

    def ledger(self, config, clients, clients_per_round) -> ClientDPLedger:
        return ClientDPLedger(config, clients, clients_per_round)

    def threat_assumption(self, config, aggregated=None) -> dict[str, Any]:
        """The clip S on the update; the noise the attacker's view carries.

        The server adds DP-FedAvg's noise after it has seen a plain run's
        upload (no noise in that view); under secure aggregation each of the
        ``m`` clients adds its distributed share ``N(0, (Z S)^2 / m)`` before
        masking.
        """
        noise = 0.0 if aggregated is None else float(config.privacy.noise_multiplier) / aggregated ** 0.5
        return {"clip_norm": float(config.privacy.clip), "noise_multiplier": noise}

    def supports(self, method) -> str:
        """Refused where :func:`~privreid.defenses.client_dp.mechanism.with_client_dp` refuses (default options)."""
        from privreid.defenses.client_dp.mechanism import REPLACEABLE

        if not method.communicates or not method.has_global_model:
            return "n/a (no model is shared between clients)"
        strategy = method.strategy(RunConfig(federation=FederationConfig(method=method.name)))
        if type(strategy) not in REPLACEABLE:
            return f"no (its server aggregates with {type(strategy).__name__})"
        return "yes"


register(ClientDP())
