"""A client's optimiser state kept in its memory between rounds (DPPT's ``persistent_optimizer``).

privreid builds a fresh optimiser every round (:class:`~privreid.federated.client.SupervisedUpdate`), as FedPav's
reference code does.  L2RW+'s reference code (Joey623/L2RW, ``CI/train.py:399-402`` and ``632-634``) instead builds
one SGD optimiser per client before the first round and steps it in every round, so its momentum buffers carry over
from the client's previous round into the next, applied to the freshly downloaded global weights.

:func:`save_optimizer_state` stores the per-parameter state of an optimiser (SGD's momentum buffers, Adam's moments
and step) in the client's memory (``ClientContext.memory``: private, checkpointed, restored on ``--resume``) under
``optimizer/<parameter index>/<name>``; :func:`load_optimizer_state` loads it into the next round's optimiser, built
over the same parameters in the same order.  The parameter groups are not stored: each round's optimiser sets them.
Cost: one copy of the trained parameters per client (SGD with momentum), in its memory file.
"""

from __future__ import annotations

from collections.abc import MutableMapping

import torch

#: prefix of the optimiser-state entries of a client's memory
OPTIMIZER_PREFIX = "optimizer/"


def save_optimizer_state(opt: torch.optim.Optimizer, memory: MutableMapping) -> None:
    """Replace the optimiser entries of ``memory`` with copies (on the CPU) of ``opt``'s per-parameter state."""
    for key in [k for k in memory if k.startswith(OPTIMIZER_PREFIX)]:
        del memory[key]
    for index, state in opt.state_dict()["state"].items():
        for name, value in state.items():
            if value is not None:
                memory[f"{OPTIMIZER_PREFIX}{index}/{name}"] = value.detach().to("cpu", copy=True)


def load_optimizer_state(opt: torch.optim.Optimizer, memory: MutableMapping) -> bool:
    """Load the state :func:`save_optimizer_state` stored in ``memory`` into ``opt``; whether there was any.

    ``opt`` keeps its parameter groups; the tensors are copied (the memory's
    entries are never changed by the optimiser's in-place updates).
    """
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key in memory:
        if key.startswith(OPTIMIZER_PREFIX):
            index, name = key[len(OPTIMIZER_PREFIX):].split("/", 1)
            state.setdefault(int(index), {})[name] = memory[key].clone()
    if not state:
        return False
    current = opt.state_dict()
    opt.load_state_dict({"state": state, "param_groups": current["param_groups"]})
    return True
