"""``--beta``: FedReID's white noise (paper 002, Eq. 14 / 15; the mechanism: :mod:`privreid.defenses.beta_noise.mechanism`)."""

from __future__ import annotations

from typing import Any

from privreid.config import RunConfig
from privreid.defenses.registry import Defense, DefenseLedger, register


class BetaLedger(DefenseLedger):
    """Nothing to account (no formal guarantee); the statement names the noise and says so."""

    def __init__(self, config: RunConfig):
        super().__init__()
        self.config = config

    def statement(self, out, metrics) -> None:
        out["beta"] = {"mode": self.config.privacy.beta_mode, "scale": self.config.privacy.beta}
        if out["defense"] is None:
            out.update({"defense": f"beta white noise ({self.config.privacy.beta_mode})", "guarantee":
                        "none: beta noise without clipping has no formal differential-privacy guarantee"})
        else:
            out["notes"].append("beta white noise is added on top; it claims no extra guarantee")


class BetaNoise(Defense):
    name = "beta"
    flag = "--beta"
    summary = "FedReID's white noise beta*N(0,1) on the aggregate (Eq. 14) and/or the download (Eq. 15); no guarantee"
    order = 30
    example_settings = {"beta": 0.01, "beta_mode": "both"}

    def enabled(self, config: RunConfig) -> bool:
        return config.privacy.beta > 0

    def wrap(self, method, config):
        from privreid.defenses.beta_noise.mechanism import with_beta_noise

        return with_beta_noise(method, config.privacy.beta, config.privacy.beta_mode)

    def ledger(self, config, clients, clients_per_round) -> BetaLedger:
        return BetaLedger(config)

    def threat_assumption(self, config, aggregated=None) -> dict[str, Any]:
        """Upload noise on the observed gradient (Eq. 14), download noise on the victim's model (Eq. 15)."""
        return {"beta": config.privacy.beta if config.privacy.beta_mode in ("upload", "both") else 0.0,
                "download_beta": config.privacy.beta if config.privacy.beta_mode in ("download", "both") else 0.0}


register(BetaNoise())
