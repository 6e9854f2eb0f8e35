"""The ``--target-epsilon`` budget shared by the differentially private defenses."""

from __future__ import annotations

from privreid.config import RunConfig
from privreid.errors import ConfigError

#: relative slack of the budget check (float noise of summing RDP over rows)
BUDGET_SLACK = 1e-9


def exceeds(config: RunConfig, eps: float) -> bool:
    """Whether ``eps`` is above ``--target-epsilon`` (never without a target)."""
    target = config.privacy.target_epsilon
    return target is not None and eps > target * (1 + BUDGET_SLACK)


def check_first_round(config: RunConfig, first: dict[str, float]) -> None:
    """ConfigError when the epsilon after the first round (``{who: epsilon}``) already exceeds the target."""
    over = {k: e for k, e in first.items() if exceeds(config, e)}
    if over:
        name, eps = max(over.items(), key=lambda kv: kv[1])
        raise ConfigError(f"--target-epsilon {config.privacy.target_epsilon:g} is exceeded by the first "
                          f"round already ({name}: epsilon {eps:.3g}); raise the target, the noise "
                          f"multiplier or the delta, or lower the steps per round")


def latest_privacy_records(metrics: list[dict]) -> dict[str, dict]:
    """The last ``scope: "privacy"`` record of each client (``"server"`` for records without a client)."""
    latest: dict[str, dict] = {}
    for rec in metrics:
        if rec.get("scope") == "privacy":
            latest[rec.get("client", "server")] = rec
    return latest
