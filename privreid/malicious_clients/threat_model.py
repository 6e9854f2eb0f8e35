"""When the malicious clients attack, and which they are: options of every adversary.

``--set robustness.adversary.OPTION=VALUE``:

``rounds``
    ``"START:STOP"``, the 1-based inclusive window of rounds in which the malicious clients attack (``"START:"`` /
    ``":STOP"``: to the last / from the first round); default: every round.
``every``
    ``K``: attack in every ``K``-th round of the window, from ``START`` (1).
``draw``
    ``fixed`` (default): the clients of ``--malicious-clients``; ``per-round``: ``K`` clients drawn among the
    federation every round (``--malicious-clients K``), from the run's seed.

Outside its attack rounds a malicious client is honest: it trains and uploads as the method says, an attack that
poisons its data on its dormant data (:meth:`~privreid.malicious_clients.Adversary.dormant_client`: its own images).
Such an attack poisons fixed clients once, before training, so it refuses the per-round draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privreid.errors import ConfigError
from privreid.seeding import derive_seed

#: the threat-model options every adversary takes, and their defaults
THREAT_MODEL = {"rounds": None, "every": 1, "draw": "fixed"}
DRAWS = ("fixed", "per-round")


@dataclass(frozen=True)
class ThreatModel:
    """The attack rounds ``start..stop`` (1-based, inclusive) every ``every``, and the draw of the malicious clients."""

    start: int
    stop: int
    every: int
    draw: str
    #: the federation's client names and the fixed malicious ones
    clients: tuple[str, ...]
    fixed: tuple[str, ...]
    seed: int

    def malicious_in(self, round_index: int) -> frozenset[str]:
        """The clients that attack in round ``round_index`` (0-based) if selected: none outside the attack rounds."""
        r = round_index + 1
        if not (self.start <= r <= self.stop and (r - self.start) % self.every == 0):
            return frozenset()
        if self.draw == "fixed":
            return frozenset(self.fixed)
        rng = np.random.default_rng(derive_seed(self.seed, "adversary-draw", round_index))
        return frozenset(self.clients[i] for i in rng.choice(len(self.clients), len(self.fixed), replace=False))

    def every_round(self, rounds: int) -> bool:
        """Whether the malicious clients attack in all ``rounds`` rounds."""
        return self.start == 1 and self.stop == rounds and self.every == 1

    def record(self) -> dict:
        return {"rounds": [self.start, self.stop], "every": self.every, "draw": self.draw}


def threat_model(settings: dict, clients: list, malicious: list, rounds: int, seed: int, name: str,
                 poisons_data: bool) -> ThreatModel:
    """The :class:`ThreatModel` of ``settings``; a one-line ConfigError for a bad window, frequency or draw."""
    window, every, draw = (settings.get(k, v) for k, v in THREAT_MODEL.items())
    if poisons_data and draw != "fixed":
        raise ConfigError(f"adversary {name!r} poisons its clients' data once, before training; draw=per-round "
                          "applies to attacks on the uploads only")
    start, stop = 1, rounds
    if window is not None:
        first, sep, last = str(window).partition(":")
        try:
            start, stop = int(first or 1), int(last or rounds)
        except ValueError:
            sep = ""
        if not sep or not 1 <= start <= stop <= rounds:
            raise ConfigError(f"adversary {name!r}: rounds must be START:STOP with 1 <= START <= STOP <= {rounds} "
                              f"(the run's rounds; got {window!r})")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ConfigError(f"adversary {name!r}: every must be a whole number >= 1 (got {every!r})")
    if draw not in DRAWS:
        raise ConfigError(f"adversary {name!r}: draw must be one of {', '.join(DRAWS)} (got {draw!r})")
    if draw == "per-round" and not isinstance(settings["malicious"], int):
        raise ConfigError(f"adversary {name!r}: draw=per-round draws a number of clients (--malicious-clients K), "
                          "not named ones")
    return ThreatModel(start, stop, every, draw, tuple(c.name for c in clients), tuple(c.name for c in malicious),
                       seed)
