"""Sign flipping: the malicious client uploads ``g - scale * (theta - g)``, its update reversed (and scaled)."""

from __future__ import annotations

from privreid.malicious_clients import register_malicious_client
from privreid.malicious_clients.updates import RescaledUpdate


class SignFlip(RescaledUpdate):
    name = "sign-flip"
    summary = "the update's sign reversed (and scaled): uploads g - scale * (theta - g)"
    options = {"scale": 1.0}
    sign = -1.0


register_malicious_client(SignFlip())
