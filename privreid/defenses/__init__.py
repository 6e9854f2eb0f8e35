"""Defences: wrappers around a method's server strategy and download.

Methods never import defences; :func:`apply_defenses` composes them from the
run configuration, so every method gets them.
"""

from __future__ import annotations

from ..config import RunConfig
from ..federated.registry import Method
from .beta_noise import with_beta_noise


def apply_defenses(method: Method, config: RunConfig) -> Method:
    """``method`` with the defences the configuration asks for."""
    t = config.train
    if t.beta > 0:
        method = with_beta_noise(method, t.beta, t.beta_mode)
    return method


def privacy_statement(config: RunConfig) -> dict:
    """What the run's defences do and do not guarantee (written to summary.json)."""
    t = config.train
    if t.beta > 0:
        return {"defense": f"beta white noise ({t.beta_mode})", "beta": t.beta, "epsilon": None,
                "guarantee": "none: beta noise without clipping has no formal differential-privacy guarantee"}
    return {"defense": None, "epsilon": None, "guarantee": "none"}


__all__ = ["apply_defenses", "privacy_statement", "with_beta_noise"]
