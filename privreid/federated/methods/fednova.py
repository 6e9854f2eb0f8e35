"""FedNova: normalised averaging (Wang, Liu, Liang, Joshi & Poor, "Tackling the Objective Inconsistency
Problem in Heterogeneous Federated Optimization", NeurIPS 2020), with decoupled identity classifiers.

A comparator of L2RW+ (paper 003, Table II) and FedPav (paper 004, Table 4).  Clients train as in FedAvg
(:class:`~privreid.federated.client.SupervisedUpdate`); the server normalises each client's cumulative update by its
number of local steps before averaging (the paper's FedNova update, with FedAvg's weights ``p_i = n_i / n``)::

    d_i      = (x - x_i) / a_i                      normalised update of client i
    tau_eff  = sum_i p_i a_i                        effective number of steps
    x_new    = x - tau_eff * sum_i p_i d_i

``a_i = ||a_i||_1`` is the norm of client ``i``'s step-weight vector: ``tau_i`` (its local steps, the upload's
``steps`` metric) for plain SGD and, for SGD with momentum ``rho``, the paper's ``a_i = (tau_i - rho (1 - rho^tau_i) /
(1 - rho)) / (1 - rho)`` (the sum of the step weights ``(1 - rho^(tau_i - k)) / (1 - rho)``, ``k = 0 .. tau_i - 1``).
With equal ``tau_i`` it is exactly FedAvg's ``sum_i p_i x_i``.

The identity classifier stays on its client ("+D").  Deviations: privreid's SGD uses Nesterov momentum where the
``a_i`` above is heavy-ball's; weight decay is folded into the local update (FedNova's analysis treats it as part of
the gradient as well); the normalisation applies to every floating tensor of the shared state, BatchNorm running
statistics included; integer buffers come from the client with the most samples, as in
:func:`~privreid.federated.strategy.weighted_average`.
"""

from __future__ import annotations

import torch

from privreid.federated.client import SupervisedUpdate
from privreid.federated.policy import CLASSIFIER_LOCAL, StateDict
from privreid.federated.registry import Method, register
from privreid.federated.strategy import RoundResult, Strategy, Upload

#: the upload metric holding the client's number of local steps (SupervisedUpdate's)
STEPS = "steps"


def step_norm(steps: float, momentum: float = 0.0) -> float:
    """``||a_i||_1`` of ``steps`` local SGD steps with momentum ``rho = momentum`` (module docstring)."""
    if steps <= 0:
        raise ValueError(f"a client took {steps} local steps; FedNova needs at least one")
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum must lie in [0, 1), got {momentum}")
    if momentum == 0.0:
        return float(steps)
    rho = momentum
    return (steps - rho * (1.0 - rho ** steps) / (1.0 - rho)) / (1.0 - rho)


class NormalisedAverage(Strategy):
    """FedNova's server update (module docstring); pure in its inputs."""

    def __init__(self, momentum: float = 0.0):
        self.momentum = momentum

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> RoundResult:
        if not uploads:
            raise ValueError("cannot aggregate zero uploads")
        total = float(sum(up.num_samples for up in uploads))
        if total <= 0:
            raise ValueError("aggregation weights must sum to a positive value")
        p = [up.num_samples / total for up in uploads]
        a = []
        for up in uploads:
            if STEPS not in up.metrics:
                raise ValueError(f"client {up.client} did not report its local steps ({STEPS!r})")
            a.append(step_norm(up.metrics[STEPS], self.momentum))
        tau_eff = sum(pi * ai for pi, ai in zip(p, a))
        weights = [tau_eff * pi / ai for pi, ai in zip(p, a)]  # x_new = x + sum_i w_i (x_i - x)
        heaviest = max(range(len(uploads)), key=lambda i: (uploads[i].num_samples, -i))
        out: StateDict = {}
        for key, value in uploads[0].state.items():
            if not torch.is_floating_point(value):
                out[key] = uploads[heaviest].state[key].clone()
                continue
            start = global_state[key].to(torch.float64)
            step = sum(w * (up.state[key].to(torch.float64) - start) for w, up in zip(weights, uploads))
            out[key] = (start + step).to(value.dtype)
        return RoundResult(out)


FEDNOVA = register(
    Method(
        name="fednova",
        # DP-SGD's plan fixes each client's local steps from its dataset size (public): post-processing
        dp_sgd_support="yes (its server normalises by the local step count, fixed by the public dataset size)",
        summary="FedNova (Wang et al. 2020): updates normalised by local steps before averaging; local classifiers",
        policy=CLASSIFIER_LOCAL,
        make_client_update=SupervisedUpdate,
        make_strategy=lambda config, model_config: NormalisedAverage(
            momentum=config.optim.momentum if config.optim.optimizer == "sgd" else 0.0),
        # the server reads each client's local step count to normalise its update (Wang et al. 2020, Sec. 4)
        needs_per_client_uploads=True,
    )
)
