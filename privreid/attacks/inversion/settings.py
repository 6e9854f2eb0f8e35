"""The settings of one gradient-inversion attack: which attack, its distance, TV weight and Adam schedule.

Plain data without torch, so that ``privreid invert --help`` reads the
options' defaults from this dataclass without importing the attacks
(:mod:`.optimise`, which registers them, is imported when settings are
checked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from privreid.errors import ConfigError

if TYPE_CHECKING:
    from .optimise import InversionAttack

#: the gradient (or feature) distances an attack can match with
MATCHES = ("l2", "cosine")


@dataclass(frozen=True)
class InversionSettings:
    """Attack, distance, TV weight and Adam schedule; ``match`` / ``tv`` ``None`` = the attack's default."""

    attack: str = "idlg"
    match: str | None = None
    tv: float | None = None
    iterations: int = 200
    lr: float = 0.01

    def __post_init__(self) -> None:
        from .optimise import ATTACKS

        ATTACKS.get(self.attack)  # the registry's one-line error for an unknown name
        if self.match is not None and self.match not in MATCHES:
            raise ConfigError(f"unknown --match {self.match!r}; choose one of {', '.join(MATCHES)}")
        if self.tv is not None and not 0 <= self.tv < float("inf"):
            raise ConfigError(f"--tv must be finite and >= 0 (got {self.tv})")
        if self.iterations < 1:
            raise ConfigError(f"--iterations must be >= 1 (got {self.iterations})")
        if not 0 < self.lr < float("inf"):
            raise ConfigError(f"--lr must be finite and > 0 (got {self.lr})")

    @property
    def inversion_attack(self) -> InversionAttack:
        from .optimise import ATTACKS

        return ATTACKS[self.attack]

    @property
    def distance(self) -> str:
        return self.match or self.inversion_attack.distance

    @property
    def tv_weight(self) -> float:
        return self.inversion_attack.tv if self.tv is None else self.tv
