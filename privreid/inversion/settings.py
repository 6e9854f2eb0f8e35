"""The settings of one gradient-inversion attack: the attack, its objective and prior, its optimiser, and the
client step it attacks.

Plain data without torch, so ``privreid invert --help`` reads its defaults without importing the attacks (the
registry :data:`INVERSION_ATTACKS` is here; :mod:`.optimise` registers the built-ins when settings are checked).
The defaults are privreid's strong recipe, Geiping et al.'s ("Inverting Gradients", NeurIPS 2020, Sec. 4, Eq.
4) as their reference implementation configures it: cosine matching plus TV of the normalised image (0.2),
Adam at lr 0.1 on the gradient's **sign**, lr / 10 at 3/8, 5/8 and 7/8 of the budget, an N(0, 1) start in
normalised space, boxed pixels, the lowest-objective iterate of ``restarts`` starts. :data:`PRESETS` holds
the papers' settings (L2RW+'s Fig. 8: iDLG, Adam at lr 0.01 on ``[0, 1]`` pixels from uniform noise, last
iterate).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from privreid.errors import ConfigError
from privreid.registry import Registry

if TYPE_CHECKING:
    import torch
    from torch import nn

    from privreid.inversion.observation import Observation

#: the gradient (or feature) distances an attack can match with
MATCHES = ("l2", "cosine")
#: the optimisers of the dummy image
OPTIMISERS = ("adam", "sgd")
#: learning-rate schedules: ``step`` divides it by 10 at 3/8, 5/8 and 7/8 of the iterations; ``none`` keeps it
SCHEDULES = ("step", "none")
#: where the image is optimised, boxed and regularised: the model's normalised input or ``[0, 1]`` pixels
SPACES = ("normalised", "pixels")
#: the random start: N(0, 1) in normalised input space, or U[0, 1] pixels
STARTS = ("normal", "uniform")
#: which iterate is returned: the one with the lowest objective, or the last
SELECTS = ("best", "last")
#: total variation: anisotropic (mean |dx| + mean |dy|) or isotropic (mean sqrt(dx^2 + dy^2))
TV_FORMS = ("anisotropic", "isotropic")
#: how a multi-step local update is attacked: as one averaged gradient, or by simulating the local steps
UPDATES = ("simulate", "gradient")
#: the milestones of the ``step`` schedule, as fractions of the iterations (x 0.1 at each)
STEP_MILESTONES = (3 / 8, 5 / 8, 7 / 8)


class InversionAttack:
    """A gradient-inversion attack: its ``privreid invert --method`` name, default distance and TV weight, and how it
    inverts a ``full`` observation (:meth:`invert_full`; the shared threat models need no label and share one
    objective, :func:`.optimise.invert_shared_gradients`)."""

    name: str = ""
    summary: str = ""
    distance: str = "l2"
    tv: float = 0.0

    def invert_full(self, model: nn.Module, observation: Observation, start: torch.Tensor, *,
                    settings: InversionSettings, loss_fn: nn.Module, label_smoothing: float,
                    generator: torch.Generator | None, progress: bool):
        """``(images (B, 3, H, W), inferred label(s), label rule)`` from the whole observed gradient of a batch of
        ``observation.batch`` images (the label an int for one image, a list for a batch).  ``start`` holds
        ``restarts`` stacked starts of ``B`` images each."""
        raise NotImplementedError


def _check_attack(attack: InversionAttack) -> None:
    if attack.distance not in MATCHES:
        raise ConfigError(f"inversion attack {attack.name!r}: distance must be one of {', '.join(MATCHES)}")


#: ``privreid invert --method`` name -> inversion attack, in ``--help`` order (the built-ins: :mod:`.optimise`)
INVERSION_ATTACKS: Registry[InversionAttack] = Registry(
    "inversion attack", builtins=("privreid.inversion.optimise",), check=_check_attack)


def register_inversion_attack(attack: InversionAttack) -> InversionAttack:
    """Add ``attack`` to :data:`INVERSION_ATTACKS` (``privreid invert --method <name>`` then selects it); returns
    it."""
    return INVERSION_ATTACKS.register(attack)


def unregister_inversion_attack(name: str) -> None:
    """Remove inversion attack ``name`` (a test's or a notebook's own); unknown names are refused."""
    INVERSION_ATTACKS.unregister(name)


@dataclass(frozen=True)
class InversionSettings:
    """Attack, objective, prior, optimiser and the attacked client step; ``match`` / ``tv`` ``None``: the attack's
    default. ``batch``: images in the step; ``local_steps`` / ``local_lr``: SGD steps before the upload
    (``(theta_0 - theta_T) / (local_lr * local_steps)``), attacked as one gradient or by simulating them
    (``update``; Geiping et al., Sec. 6)."""

    attack: str = "ig"
    match: str | None = None
    tv: float | None = None
    tv_form: str = "anisotropic"
    bn: float = 0.0
    space: str = "normalised"
    start: str = "normal"
    optimizer: str = "adam"
    signed: bool = True
    schedule: str = "step"
    select: str = "best"
    restarts: int = 1
    iterations: int = 200
    lr: float = 0.1
    batch: int = 1
    local_steps: int = 1
    local_lr: float = 0.01
    update: str = "simulate"

    def __post_init__(self) -> None:
        INVERSION_ATTACKS.get(self.attack)  # the registry's one-line error for an unknown name
        for name, allowed in (("match", MATCHES), ("tv_form", TV_FORMS), ("space", SPACES), ("start", STARTS),
                              ("optimizer", OPTIMISERS), ("schedule", SCHEDULES), ("select", SELECTS),
                              ("update", UPDATES)):
            value = getattr(self, name)
            if value is not None and value not in allowed:
                raise ConfigError(f"unknown --{name.replace('_', '-')} {value!r}; choose one of {', '.join(allowed)}")
        for name in ("tv", "bn"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < float("inf"):
                raise ConfigError(f"--{name} must be finite and >= 0 (got {value})")
        for name in ("iterations", "restarts", "batch", "local_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        for name in ("lr", "local_lr"):
            if not 0 < getattr(self, name) < float("inf"):
                raise ConfigError(f"--{name.replace('_', '-')} must be finite and > 0 (got {getattr(self, name)})")

    @classmethod
    def preset(cls, name: str, **overrides) -> "InversionSettings":
        """A paper's setting (:data:`PRESETS`), with ``overrides``."""
        if name not in PRESETS:
            raise ConfigError(f"unknown inversion preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    @property
    def inversion_attack(self) -> InversionAttack:
        return INVERSION_ATTACKS[self.attack]

    @property
    def distance(self) -> str:
        return self.match or self.inversion_attack.distance

    @property
    def tv_weight(self) -> float:
        return self.inversion_attack.tv if self.tv is None else self.tv

    def record(self) -> dict:
        """Every setting, the attack's defaults resolved (``metrics.json``'s ``settings``)."""
        return {**dataclasses.asdict(self), "match": self.distance, "tv": self.tv_weight}

    def describe(self) -> str:
        """Which attack and budget produced a number, in one line (every report that prints an inversion number)."""
        prior = f"TV {self.tv_weight:g} ({self.tv_form}, {self.space})" if self.tv_weight else "no TV"
        if self.bn:
            prior += f", BN statistics {self.bn:g}"
        opt = f"{'signed ' if self.signed else ''}{self.optimizer.capitalize() if self.optimizer == 'adam' else 'SGD'}"
        schedule = "step decay at 3/8, 5/8, 7/8" if self.schedule == "step" else "constant"
        step = (f"batch {self.batch}" + (f", {self.local_steps} local steps at lr {self.local_lr:g} attacked by "
                                         f"{'simulating them' if self.update == 'simulate' else 'one averaged gradient'}"
                                         if self.local_steps > 1 else ""))
        return (f"{self.attack} ({self.distance} matching, {prior}; {self.iterations} iterations of {opt} at lr "
                f"{self.lr:g}, {schedule}; {self.start} start; {self.select} iterate of {self.restarts} "
                f"restart(s); {step})")


#: the papers' inversion settings: ``InversionSettings.preset(name)``
PRESETS: dict[str, dict] = {
    # L2RW+ (paper 003, "Discussion on privacy"): iDLG, Adam at lr 0.01, 200 iterations, on [0, 1] pixels
    "l2rw-fig8": {"attack": "idlg", "iterations": 200, "lr": 0.01, "signed": False, "schedule": "none",
                  "space": "pixels", "start": "uniform", "select": "last"},
}
