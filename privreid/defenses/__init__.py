"""Defenses: wrappers around a method's client update, server strategy and download.

Methods never import defenses, and the engine never names one: every defense is a registered plugin (:mod:`.registry`,
one module each under :mod:`.plugins`), and :func:`apply_defenses` composes the ones a run asks for, so every method
gets them:

* record-level DP-SGD on every client (:mod:`.dp_sgd`, ``--dp-sgd``);
* client-level DP, DP-FedAvg (:mod:`.client_dp`, ``--client-dp``);
* FedReID's beta white noise (:mod:`.beta_noise`, ``--beta``, ``--beta-mode``), no formal guarantee: on the server's
  aggregate (upload, Eq. 14) and/or on the model each client starts training from (download, Eq. 15), trainable
  parameters only; buffers (BatchNorm statistics) are transmitted noise-free;
* secure aggregation (:mod:`.secure_aggregation`, ``--secure-aggregation``), outermost;
* any defense registered by another module, switched on by ``RobustnessConfig.defenses[name]``.

:class:`PrivacyLedger` is a round observer of the engine: it checks the defenses' settings against the federation
before anything is written, reads what every received upload reports for it (``Upload.reports``; never client
memory), logs their accounting after every round (``scope: "privacy"`` records in ``metrics.jsonl``), stops training
before a ``--target-epsilon`` budget would be exceeded, and writes the ``privacy`` statement of ``summary.json``; the
engine checkpoints its :meth:`~PrivacyLedger.state_dict`.  The differential-privacy modules import Opacus, so they are
imported only when a run asks for them.
"""

from __future__ import annotations

from typing import Any

from privreid.config import RunConfig
from privreid.data.types import ClientData
from privreid.federated.registry import Method
from privreid.federated.strategy import RoundResult, Upload
from privreid.defenses.registry import Defense, DefenseLedger, enabled_defenses, register

#: ``server_view`` of the statement when no defense hides the uploads
CLEAR_VIEW = "every selected client's upload (shared keys, sample count, metrics) in the clear"


def apply_defenses(method: Method, config: RunConfig) -> Method:
    """``method`` wrapped by every defense ``config`` enables, innermost first (:attr:`Defense.order`)."""
    for defense in enabled_defenses(config):
        method = defense.wrap(method, config)
    return method


class PrivacyLedger:
    """The run's privacy, as a round observer of the engine (see the module docstring).

    Args:
        config: the run configuration.
        clients: the clients that train (after ``prepare_clients``).
        clients_per_round: ``m``, the clients sampled every round.

    Every enabled defense's :meth:`~.registry.Defense.check` runs first,
    outermost defense first (ConfigError for, e.g., ``delta >= 1/N``, an
    unreachable target epsilon, or a target that the first round already
    exceeds); then each gets its :class:`~.registry.DefenseLedger`.
    """

    #: the ``summary.json`` key of :meth:`summary`
    key = "privacy"

    def __init__(self, config: RunConfig, clients: list[ClientData], clients_per_round: int):
        enabled = enabled_defenses(config)
        for defense in reversed(enabled):
            defense.check(config, clients, clients_per_round)
        self.names: list[str] = [d.name for d in enabled]
        self.ledgers: list[DefenseLedger] = [d.ledger(config, clients, clients_per_round) for d in enabled]
        self.notes: list[str] = [note for ledger in self.ledgers for note in ledger.notes]

    def on_upload(self, upload: Upload) -> None:
        """One upload reached the server (the engine's ``receive``): each ledger reads its ``reports``."""
        for ledger in self.ledgers:
            ledger.on_upload(upload)

    def before_round(self, round_index: int, selected: list[ClientData]) -> str | None:
        """Why round ``round_index`` (0-based) must not run: the first defense's reason, or None."""
        for ledger in self.ledgers:
            reason = ledger.before_round(round_index, selected)
            if reason:
                return reason
        return None

    def on_round_result(self, round_no: int, result: RoundResult) -> None:
        """Round ``round_no`` (1-based) was aggregated into ``result``: each ledger sees it."""
        for ledger in self.ledgers:
            ledger.on_round_result(round_no, result)

    def after_round(self, round_no: int) -> list[dict[str, Any]]:
        """``metrics.jsonl`` records of the accounting after round ``round_no`` (1-based)."""
        return [rec for ledger in self.ledgers for rec in ledger.after_round(round_no)]

    def state_dict(self) -> dict[str, Any]:
        """Every ledger's state by defense name (the engine checkpoints it with the server's state)."""
        return {name: ledger.state_dict() for name, ledger in zip(self.names, self.ledgers)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, ledger in zip(self.names, self.ledgers):
            ledger.load_state_dict(state.get(name, {}))

    def summary(self, metrics: list[dict[str, Any]], stopped: str | None = None) -> dict[str, Any]:
        """The ``privacy`` entry of ``summary.json``: mechanism, epsilon spent, what it covers, the server's view."""
        out: dict[str, Any] = {"notes": list(self.notes), "stopped": stopped, "defense": None, "epsilon": None,
                               "guarantee": "none", "secure_aggregation": None, "server_view": CLEAR_VIEW}
        for ledger in self.ledgers:
            ledger.statement(out, metrics)
        return out


def privacy_observers(config: RunConfig, clients: list[ClientData], clients_per_round: int) -> list[PrivacyLedger]:
    """The engine's round observers for the defenses of ``config``: the privacy ledger."""
    return [PrivacyLedger(config, clients, clients_per_round)]


__all__ = ["CLEAR_VIEW", "Defense", "DefenseLedger", "PrivacyLedger", "apply_defenses", "privacy_observers",
           "register"]

