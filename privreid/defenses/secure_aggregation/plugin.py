"""``--secure-aggregation``: the server learns only the sum of a round's uploads (SecAgg+;
the mechanism: :mod:`privreid.defenses.secure_aggregation.mechanism`, on Flower's primitives)."""

from __future__ import annotations

from privreid.config import RunConfig
from privreid.dependencies import require
from privreid.defenses.registry import Defense, DefenseLedger, register

WHO = "--secure-aggregation (SecAgg+ on Flower's primitives)"


class SecureAggregationLedger(DefenseLedger):
    """The protocol's settings, what the server saw and the values that saturated (``scope: "secagg"`` records)."""

    def __init__(self, config: RunConfig):
        super().__init__()
        self.config = config

    def statement(self, out, metrics) -> None:
        from privreid.defenses.secure_aggregation.mechanism import statement

        out["secure_aggregation"] = statement(metrics, self.config)
        out["server_view"] = out["secure_aggregation"]["server_view"]


class SecureAggregation(Defense):
    name = "secure-aggregation"
    flag = "--secure-aggregation"
    summary = "SecAgg+ (Bell et al. 2020): the server sees only the sum of a round's uploads"
    order = 40  # outermost: the strategies of the defenses above run on the secure sum
    example_settings = {"secure_aggregation": True}

    def enabled(self, config: RunConfig) -> bool:
        return config.privacy.secure_aggregation

    def check(self, config, clients, clients_per_round) -> None:
        require("flwr", WHO)
        from privreid.defenses.secure_aggregation.mechanism import check_secure_aggregation

        check_secure_aggregation(config, clients_per_round)

    def wrap(self, method, config):
        require("flwr", WHO)
        from privreid.defenses.secure_aggregation.mechanism import with_secure_aggregation

        return with_secure_aggregation(method)

    def ledger(self, config, clients, clients_per_round) -> SecureAggregationLedger:
        return SecureAggregationLedger(config)

    def supports(self, method) -> str:
        """Whether the method's server needs only the weighted sum of the uploads."""
        if not method.communicates or not method.has_global_model:
            return "n/a (no model is shared between clients)"
        if method.needs_per_client_uploads is None:
            return "no (undeclared)"
        return "no (its server reads each client's upload)" if method.needs_per_client_uploads else "yes"


register(SecureAggregation())
