"""The fastest implementation of torch's SGD / Adam that reproduces the per-tensor arithmetic bit for bit.

torch ships three implementations of each optimiser: the per-tensor loop (the default on CPU), ``foreach``
(multi-tensor ops; the default on CUDA) and ``fused`` (one kernel).  On a CPU, the per-tensor SGD step of a ResNet-18
is about 12% of a training step at 64x32; ``fused`` is several times faster.  Whether an implementation gives the
per-tensor loop's bits depends on its kernel (and on how it was compiled for the device: a fused multiply-add rounds
once where the loop rounds twice), so :func:`implementation` runs two steps of each candidate on a small probe (odd
sizes, so both the vectorised body and the scalar tail of a kernel run) and takes the first whose parameters equal
the loop's exactly: ``fused`` then ``foreach`` for SGD, ``foreach`` only for Adam (fused Adam computes its bias
corrections from a tensor step count in the kernel's precision, so its bits drift from the loop's at some steps and
learning rates that a short probe need not meet; measured on a ResNet-18).  The check runs once per process, device
type and set of hyper-parameters, and draws from its own generator, never the global random stream; runs therefore
train exactly the loop's weights, and ``--resume`` stays bit-identical.
"""

from __future__ import annotations

from typing import Any

import torch

_OPTIMISERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}
_CANDIDATES = {"sgd": ({"fused": True}, {"foreach": True}), "adam": ({"foreach": True},)}
_PROBE_SIZES = (1, 7, 37, 1031)
_CHOICE: dict[tuple, dict[str, bool]] = {}


def implementation(kind: str, device: torch.device | str, **hyper: Any) -> dict[str, bool]:
    """``{"fused": True}``, ``{"foreach": True}`` or ``{}`` (the per-tensor loop) for ``kind`` on ``device``.

    ``hyper`` are the optimiser's keyword arguments besides the parameters
    (momentum, weight decay, nesterov ...); the choice reproduces the
    per-tensor loop bit for bit with exactly these.
    """
    device = torch.device(device)
    key = (kind, device.type, tuple(sorted(hyper.items())))
    if key not in _CHOICE:
        reference = _probe(kind, device, hyper, {"foreach": False})
        _CHOICE[key] = {}
        for candidate in _CANDIDATES[kind]:
            try:
                trained = _probe(kind, device, hyper, candidate)
            except (RuntimeError, ValueError, TypeError):  # not supported on this device / torch
                continue
            if all(torch.equal(a, b) for a, b in zip(reference, trained)):
                _CHOICE[key] = candidate
                break
    return dict(_CHOICE[key])


def build(kind: str, groups: list[dict], device: torch.device | str, **hyper: Any) -> torch.optim.Optimizer:
    """``torch.optim.SGD`` (``kind="sgd"``) or ``Adam`` over ``groups`` in the implementation of :func:`implementation`."""
    return _OPTIMISERS[kind](groups, **hyper, **implementation(kind, device, **hyper))


def _probe(kind: str, device: torch.device, hyper: dict, impl: dict) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    params = [torch.randn(n, generator=generator).to(device).requires_grad_() for n in _PROBE_SIZES]
    grads = [[torch.randn(n, generator=generator).to(device) for n in _PROBE_SIZES] for _ in range(3)]
    lr = {"sgd": 0.05, "adam": 1e-3}[kind]
    opt = _OPTIMISERS[kind]([{"params": params[:2], "lr": lr}, {"params": params[2:], "lr": lr / 10}],
                            **hyper, **impl)
    for step in grads:
        for p, g in zip(params, step):
            p.grad = g.clone()
        opt.step()
    return [p.detach() for p in params]
