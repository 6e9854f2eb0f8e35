"""``standalone``, a non-federated baseline as a method of the same engine: every client trains alone.

Nothing is shared.  There is no global model; each client's model is
evaluated on its own domain and on the unseen domains.
"""

from __future__ import annotations

from privreid.federated.client import SupervisedUpdate
from privreid.federated.policy import NOTHING_SHARED
from privreid.federated.registry import Method, register
from privreid.federated.strategy import KeepGlobal

register(
    Method(
        name="standalone",
        dp_sgd_support="yes",
        summary="each client trains alone on its own data; nothing is shared",
        policy=NOTHING_SHARED,
        make_client_update=SupervisedUpdate,
        make_strategy=lambda config, model_config: KeepGlobal(),
        has_global_model=False,
        communicates=False,
    )
)
