"""Scaled (boosted) updates, model replacement (Bagdasaryan et al. 2020): the malicious client uploads
``g + scale * (theta - g)``; with ``scale`` = the number of clients a round averages, its trained model replaces the
global one under plain averaging."""

from __future__ import annotations

from privreid.malicious_clients import register_malicious_client
from privreid.malicious_clients.updates import RescaledUpdate


class Scaled(RescaledUpdate):
    name = "scaled"
    summary = "the update boosted (model replacement): uploads g + scale * (theta - g)"
    options = {"scale": 10.0}


register_malicious_client(Scaled())
