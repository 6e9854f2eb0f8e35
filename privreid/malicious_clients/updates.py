"""Model poisoning: a malicious client's upload rewritten as ``g + sign * scale * (theta - g)`` (the shared part of
sign flipping and scaled updates)."""

from __future__ import annotations

import torch

from privreid.errors import ConfigError
from privreid.malicious_clients import Adversary


def rescale_update(ctx, factor: float) -> None:
    """``ctx.model``'s floating entries received from the server set to ``g + factor * (theta - g)`` in place."""
    with torch.no_grad():
        for key, value in ctx.model.state_dict().items():
            g = ctx.global_state.get(key)
            if g is not None and torch.is_floating_point(value):
                g = g.to(value.device, value.dtype)
                value.copy_(g + factor * (value - g))


class RescaledUpdate(Adversary):
    """Uploads ``g + sign * scale * (theta - g)`` (option ``scale`` > 0)."""

    sign: float = 1.0

    def check(self, settings, clients, malicious, config) -> None:
        scale = settings["scale"]
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
            raise ConfigError(f"adversary {self.name!r}: scale must be a number > 0 (got {scale!r})")

    def poison_upload(self, ctx, settings) -> None:
        rescale_update(ctx, self.sign * float(settings["scale"]))
