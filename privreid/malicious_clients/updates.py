"""Model poisoning on updates ``theta - g``: the shared part of the attacks that rewrite uploads.

* :func:`rescale_update` / :class:`RescaledUpdate`: one client's upload ``g + sign * scale * (theta - g)`` (sign
  flipping, scaled updates);
* :class:`RoundAttack`: the adaptive attacks that craft the malicious uploads of a round from the round's updates
  together (ALIE, IPM, Min-Max, Min-Sum, Fang), on the floating entries of the uploads (parameters and BatchNorm
  statistics) flattened into one float64 vector per upload.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from privreid.errors import ConfigError
from privreid.federated.policy import StateDict
from privreid.malicious_clients import Adversary

#: what the colluding attacker sees of the round (option ``knowledge``): ``full``, the benign clients' updates;
#: ``partial``, only the malicious clients' own honest updates
KNOWLEDGE = ("full", "partial")


def floating_update(ctx) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``key -> (trained entry, transmitted entry)`` of the floating entries the server transmitted to ``ctx``'s
    client (the transmitted one on the trained one's device and dtype)."""
    state = ctx.model.state_dict()
    return {key: (value, ctx.global_state[key].to(value.device, value.dtype)) for key, value in state.items()
            if key in ctx.global_state and torch.is_floating_point(value)}


def rescale_update(ctx, factor: float) -> None:
    """``ctx.model``'s floating entries received from the server set to ``g + factor * (theta - g)`` in place."""
    with torch.no_grad():
        for value, g in floating_update(ctx).values():
            value.copy_(g + factor * (value - g))


class RescaledUpdate(Adversary):
    """Uploads ``g + sign * scale * (theta - g)`` (option ``scale`` > 0)."""

    sign: float = 1.0

    def check(self, settings, clients, malicious, config) -> None:
        number(self, settings, "scale")

    def poison_upload(self, ctx, settings) -> None:
        rescale_update(ctx, self.sign * float(settings["scale"]))


def number(adversary: Adversary, settings, key: str, ok: Callable[[float], bool] = lambda v: v > 0,
           must: str = "be a number > 0") -> float:
    """``settings[key]``, a number (not a bool) for which ``ok`` holds, else a one-line ConfigError (``key must
    <must>``)."""
    value = settings[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
        raise ConfigError(f"adversary {adversary.name!r}: {key} must {must} (got {value!r})")
    return float(value)


def update_keys(global_state: StateDict, state: StateDict) -> list[str]:
    """The entries of ``state`` an update attack rewrites: the floating ones the server transmitted."""
    return [k for k, v in state.items() if torch.is_floating_point(v) and k in global_state]


def update_matrix(states: list[StateDict], global_state: StateDict, keys: list[str]) -> torch.Tensor:
    """One row per state: its update ``state - g`` over ``keys``, flattened, in float64 (filled in place: one
    allocation, a model's worth of values per row)."""
    sizes = [global_state[k].numel() for k in keys]
    g = torch.cat([global_state[k].reshape(-1).double() for k in keys])
    out = torch.empty(len(states), sum(sizes), dtype=torch.float64)
    for row, state in zip(out, states):
        for part, k in zip(row.split(sizes), keys):
            part.copy_(state[k].reshape(-1))
        row.sub_(g)
    return out


def with_update(state: StateDict, global_state: StateDict, keys: list[str], update: torch.Tensor) -> StateDict:
    """``state`` with ``keys`` set to ``g + update`` (a row of :func:`update_matrix`), each in its own dtype."""
    out, start = dict(state), 0
    for k in keys:
        g = global_state[k]
        out[k] = (g.double() + update[start:start + g.numel()].view(g.shape)).to(state[k].dtype)
        start += g.numel()
    return out


def mean_std(updates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Coordinate-wise mean and standard deviation (Bessel-corrected; 0 for a single update) of the rows."""
    return updates.mean(0), updates.std(0, correction=1 if len(updates) > 1 else 0)


class RoundAttack(Adversary):
    """An attack on a round's uploads together: every malicious upload becomes ``g + craft(...)``.

    **Collusion, simulated at the server**: the malicious uploads are rewritten with knowledge of the round's benign
    updates (``knowledge`` = ``full``) or of the malicious clients' own honest updates only (``partial``) before any
    defense sees them; the server learns nothing more.  A round with no benign upload uses the malicious clients' own
    updates under ``full`` as well.
    """

    options = {"knowledge": "full"}
    #: the attack's departure from its paper, for the run's ``deviations`` (empty: none)
    deviation: str = ""

    def check(self, settings, clients, malicious, config) -> None:
        if settings["knowledge"] not in KNOWLEDGE:
            raise ConfigError(f"adversary {self.name!r}: knowledge must be one of {', '.join(KNOWLEDGE)} "
                              f"(got {settings['knowledge']!r})")

    def poison_round(self, global_state, malicious, benign, settings, rng) -> list[StateDict]:
        keys = update_keys(global_state, malicious[0])
        own = update_matrix(malicious, global_state, keys)
        full = settings["knowledge"] == "full" and bool(benign)
        reference = update_matrix(benign, global_state, keys) if full else own
        crafted = self.craft(reference, full, len(benign) + len(malicious), len(malicious), settings, rng)
        crafted = crafted.expand(len(malicious), -1) if crafted.dim() == 1 else crafted
        return [with_update(s, global_state, keys, row) for s, row in zip(malicious, crafted)]

    def craft(self, reference: torch.Tensor, full: bool, n: int, m: int, settings, rng: torch.Generator
              ) -> torch.Tensor:
        """The malicious update (one for all, or one row per malicious upload) from the ``reference`` updates
        (rows; the benign ones when ``full``), for a round of ``n`` uploads of which ``m`` malicious."""
        raise NotImplementedError
