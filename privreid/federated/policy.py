"""Parameter policies: which state keys leave the client.

A method's policy partitions a model's ``state_dict`` into **shared** keys, uploaded to and aggregated by the
server, and **local** keys, which never leave the client (FedPav's identity classifiers, SKA's local-specific
normalisation, FedARKS' part branch, ...).  The engine only ever uploads ``policy.shared(state)``; a test asserts it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from privreid.models.reid_net import CLASSIFIER_PREFIX

StateDict = dict[str, torch.Tensor]


@dataclass(frozen=True)
class ParameterPolicy:
    """``is_local(key)`` decides; everything else is shared."""

    is_local: Callable[[str], bool]
    description: str = ""

    def shared(self, state: StateDict) -> StateDict:
        return {k: v for k, v in state.items() if not self.is_local(k)}

    def local(self, state: StateDict) -> StateDict:
        return {k: v for k, v in state.items() if self.is_local(k)}


def local_prefixes(*prefixes: str, description: str = "") -> ParameterPolicy:
    """Keys starting with any of ``prefixes`` stay on the client."""
    return ParameterPolicy(is_local=lambda key: key.startswith(prefixes), description=description)


#: FedPav / "+D" baselines: the identity classifier is local, the rest shared.
CLASSIFIER_LOCAL = local_prefixes(CLASSIFIER_PREFIX, description="classifier local, backbone and neck shared")

#: Standalone training: nothing is shared.
NOTHING_SHARED = ParameterPolicy(is_local=lambda key: True, description="nothing shared")


def state_nbytes(state: StateDict) -> int:
    """Bytes needed to transmit ``state`` (raw tensor payload)."""
    return sum(t.numel() * t.element_size() for t in state.values())


def clone_state(state: StateDict) -> StateDict:
    """Detached CPU copies (what a client would serialise and send)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
