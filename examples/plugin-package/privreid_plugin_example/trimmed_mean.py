"""The method ``fedtrim``: FedPav's rounds with a coordinate-wise trimmed mean on the server (Yin et al., ICML 2018).

Every shared value of the new global model is the mean of the round's
uploads after the ``trim`` largest and ``trim`` smallest values of that
coordinate are dropped (``--opt trim=N``, default 1; the plain mean when
fewer than ``2 * trim + 1`` clients uploaded).  A client sending outlying
parameters moves the aggregate less than under an average.
"""

from dataclasses import dataclass

import torch

from privreid.errors import ConfigError
from privreid.federated.client import SupervisedUpdate
from privreid.federated.policy import CLASSIFIER_LOCAL
from privreid.federated.registry import Method, register
from privreid.federated.strategy import RoundResult, Strategy


@dataclass(frozen=True)
class TrimOptions:
    """fedtrim's method options."""

    #: uploads dropped at each end of every coordinate before averaging
    trim: int = 1


class TrimmedMean(Strategy):
    """Every shared value: the mean of the round's uploads without the ``trim`` largest and smallest."""

    def __init__(self, trim: int):
        self.trim = trim

    def aggregate(self, global_state, uploads):
        if not uploads:
            raise ValueError("cannot aggregate zero uploads")
        trim = self.trim if len(uploads) > 2 * self.trim else 0
        out = {}
        for key, value in global_state.items():
            stacked = torch.stack([u.state[key] for u in uploads]).double().sort(dim=0).values
            out[key] = stacked[trim:len(uploads) - trim].mean(dim=0).to(value.dtype)
        return RoundResult(out)


def make_strategy(config, model_config) -> TrimmedMean:
    trim = FEDTRIM.option(config, "trim")
    if trim < 0:
        raise ConfigError(f"fedtrim option trim must be >= 0, got {trim}")
    return TrimmedMean(trim)


FEDTRIM = register(Method(
    name="fedtrim",
    summary="FedPav's rounds, coordinate-wise trimmed mean on the server (Yin et al. 2018)",
    policy=CLASSIFIER_LOCAL,  # the identity classifier stays on its client, as in FedPav
    make_client_update=SupervisedUpdate,  # local SGD on the identity loss
    make_strategy=make_strategy,
    options=TrimOptions,
    needs_per_client_uploads=True,  # it reads every upload: not under --secure-aggregation
))
