"""Defense registry: every defense is one :class:`Defense` in one module, registered by name.

A defense declares everything privreid needs to know about it, so that no other module names it:

* whether a run asks for it (:meth:`Defense.enabled`) and its options (built-in defenses read their own
  ``PrivacyConfig`` fields and flags; any other reads ``RobustnessConfig.defenses[name]``, a dict of options checked against
  :attr:`Defense.options`);
* :meth:`Defense.check`: ConfigError, before anything is written, for settings it cannot run with on this federation;
* :meth:`Defense.wrap`: the method with the defense applied (its client update, server strategy, download or client
  start wrapped); :func:`privreid.defenses.apply_defenses` wraps in :attr:`Defense.order`, the lowest innermost;
* :meth:`Defense.ledger`: its accounting (:class:`DefenseLedger`): notes, what it reads from each received upload, a
  stop reason before a round, ``metrics.jsonl`` records after it, its checkpointed state and its part of the
  ``privacy`` statement of ``summary.json``; a ledger never reads client memory;
* :meth:`Defense.threat_assumption`: what an inversion attack that observes an upload (or a sum of ``m`` of them) must
  assume about it, as fields of :class:`privreid.inversion.defenses.Defense`;
* :meth:`Defense.supports`: its row of the method x defense support matrix (``privreid methods``);
  :meth:`Defense.deviation`: where it departs from its paper, for ``summary.json``'s ``deviations``;
* :attr:`Defense.upload_extras` and :meth:`Defense.server_memory_keys`: the tensors it adds to an upload beyond the
  policy's shared keys (none for the built-ins), and the keys its client update reports to the server in
  ``Upload.reports`` (read by its ledger's ``on_upload``; a Flower site's reply may carry them).

Adding a defense is one module with a :class:`Defense` subclass and
``register(MyDefense())``; docs/extending.md has a worked example.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from privreid.errors import ConfigError
from privreid.registry import Registry

if TYPE_CHECKING:
    from privreid.config import RunConfig
    from privreid.data.types import ClientData
    from privreid.federated.registry import Method
    from privreid.federated.strategy import RoundResult, Upload


class DefenseLedger:
    """A defense's accounting during one run (the default: nothing to account).

    ``notes`` are logged when the run starts and listed in the statement.
    """

    def __init__(self) -> None:
        self.notes: list[str] = []

    def on_upload(self, upload: Upload) -> None:
        """One client's upload reached the server: read what it reports (``Upload.reports``)."""

    def before_round(self, round_index: int, selected: list[ClientData]) -> str | None:
        """Why round ``round_index`` (0-based) must not run (e.g. a spent budget), or None."""
        return None

    def on_round_result(self, round_no: int, result: RoundResult) -> None:
        """Round ``round_no`` (1-based) was aggregated into ``result`` (before :meth:`after_round`)."""

    def after_round(self, round_no: int) -> list[dict[str, Any]]:
        """``metrics.jsonl`` records after round ``round_no`` (1-based)."""
        return []

    def state_dict(self) -> dict[str, Any]:
        """What the ledger keeps between rounds (checkpointed by the engine; tensors and containers)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` on ``--resume``."""

    def statement(self, out: dict[str, Any], metrics: list[dict[str, Any]]) -> None:
        """Add this defense's part to ``out``, the ``privacy`` statement of ``summary.json``, in place."""


class Defense:
    """One defense (see the module docstring); subclass it and override what differs from "nothing"."""

    #: registry key; for defenses without their own fields, the key of ``RobustnessConfig.defenses``
    name: str = ""
    #: one line for ``privreid methods`` and reports
    summary: str = ""
    #: composition order: lower wraps first (innermost); the built-ins use 10 (DP-SGD) to 40 (secure aggregation)
    order: int = 50
    #: options and their defaults, given as ``RobustnessConfig.defenses[name] = {option: value}``
    options: Mapping[str, Any] = {}
    #: keys an upload may carry beyond the policy's shared keys because of this defense
    upload_extras: frozenset[str] = frozenset()
    #: ``PrivacyConfig`` fields that switch the defense on with minimal settings (contract tests)
    example_settings: Mapping[str, Any] = {}
    #: the CLI flag of a built-in defense, which has its own ``PrivacyConfig`` fields (``None``: configured
    #: through ``RobustnessConfig.defenses``)
    flag: str | None = None

    def enabled(self, config: RunConfig) -> bool:
        """Whether ``config`` asks for this defense (default: it is a key of ``RobustnessConfig.defenses``)."""
        return self.name in config.robustness.defenses

    def option(self, config: RunConfig, key: str) -> Any:
        """The value of option ``key``: ``RobustnessConfig.defenses[name][key]`` if given, else the default."""
        return config.robustness.defenses.get(self.name, {}).get(key, self.options[key])

    def check_options(self, config: RunConfig) -> None:
        unknown = sorted(set(config.robustness.defenses.get(self.name, {})) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise ConfigError(f"defense {self.name!r} has no option {', '.join(unknown)} (its options: {known})")

    def check(self, config: RunConfig, clients: list[ClientData], clients_per_round: int) -> None:
        """ConfigError for settings this federation cannot run with (before anything is written)."""

    def wrap(self, method: Method, config: RunConfig) -> Method:
        raise NotImplementedError

    def ledger(self, config: RunConfig, clients: list[ClientData], clients_per_round: int) -> DefenseLedger:
        return DefenseLedger()

    def threat_assumption(self, config: RunConfig, aggregated: int | None = None) -> dict[str, Any]:
        """Fields of the inversion :class:`~privreid.inversion.defenses.Defense` this defense sets.

        ``aggregated``: ``None`` when the attacker sees one client's upload
        (the server of a plain run), else the number ``m`` of uploads whose
        sum it sees (secure aggregation).
        """
        return {}

    def supports(self, method: Method) -> str:
        """``"yes"``, or ``"no (why)"`` / ``"n/a (why)"``: whether ``method`` can run under this defense."""
        return "yes"

    def deviation(self, config: RunConfig) -> str | None:
        """Where this defense, as configured, departs from its paper: a sentence of ``summary.json``'s
        ``deviations`` (:mod:`privreid.deviations`), or None."""
        return None

    def server_memory_keys(self, config: RunConfig) -> tuple[str, ...]:
        """Keys of ``Upload.reports`` this defense's client update sends for its ledger (client-memory entries)."""
        return ()


#: every defense by name; the built-ins (:mod:`privreid.defenses.builtin`) register when first used
DEFENSES: Registry[Defense] = Registry("defense", builtins=("privreid.defenses.builtin",))


def register(defense: Defense) -> Defense:
    """Add ``defense`` (a run then enables it by its settings); ConfigError when its name is taken."""
    return DEFENSES.register(defense)


def unregister(name: str) -> None:
    """Remove defense ``name`` (a test's or a notebook's own defense); unknown names are refused."""
    DEFENSES.unregister(name)


def defenses() -> list[Defense]:
    """Every registered defense, in composition order (innermost first)."""
    return sorted(DEFENSES.values(), key=lambda d: (d.order, d.name))


def available_defenses() -> list[str]:
    return [d.name for d in defenses()]


def get_defense(name: str) -> Defense:
    """The defense ``name``; ConfigError naming the registered ones otherwise."""
    return DEFENSES.get(name)


def enabled_defenses(config: RunConfig) -> list[Defense]:
    """The defenses ``config`` asks for, in composition order; ConfigError for unknown names or options."""
    for name in config.robustness.defenses:
        defense = get_defense(name)
        if defense.flag is not None:
            raise ConfigError(f"defense {name!r} is configured by its own settings ({defense.flag} ...), not "
                              "robustness.defenses")
        defense.check_options(config)
    return [d for d in defenses() if d.enabled(config)]


