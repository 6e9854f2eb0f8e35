"""FedPav: Federated Partial Averaging (Zhuang et al., paper 004, Algorithm 1).

* Policy: the backbone (and neck) is shared; the identity classifier, whose size depends on the client's identities,
  stays on the client (line 10, 14).
* Client update: E local epochs of SGD on the identity loss (line 11-13).
* Server: average of the uploads weighted by data volume ``n_k / n`` (line 7).

Evaluation (Sec. 4.1): the global model, and each client's "local model", "the specialized model trained after E
local epochs in clients before uploading to the server": its trained backbone with its classifier, kept in the
client's memory (``keeps_trained_model``; one model copy per client, as the authors' code keeps every client's model;
a client not selected yet: the global model).  ``load_model(ckpt, client=NAME)`` returns it.

Option ``bn_buffers`` (``--opt bn_buffers=first``; FedPav and its CDW / KD / CC variants): the global model's
BatchNorm running statistics.  ``average`` (default): averaged with the parameters by the same weights.  ``first``:
the round's first upload's (the first selected client in client order), as the authors' reference code does:
cap-ntu/FedReID ``server.py`` ``aggregate_models`` deep-copies the first sampled client's model and averages only its
``named_parameters()`` (there, the first client of a random order).
"""

from dataclasses import dataclass

from privreid.config import RunConfig
from privreid.errors import ConfigError
from privreid.federated.client import SupervisedUpdate
from privreid.federated.policy import CLASSIFIER_LOCAL
from privreid.federated.method_options import run_options
from privreid.federated.registry import Method, register
from privreid.federated.strategy import BN_BUFFER_MODES, DataVolumeAverage


@dataclass(frozen=True)
class FedPavOptions:
    """FedPav's method options (its variants add the public set's, :mod:`.fedpav_variants`)."""

    #: BatchNorm running statistics of the global model: "average" (weighted, as the parameters) or "first" (the
    #: round's first upload's, as the reference code)
    bn_buffers: str = "average"


def bn_buffers(config: RunConfig) -> str:
    """The run's ``bn_buffers`` option, checked against :data:`~privreid.federated.strategy.BN_BUFFER_MODES`."""
    value = run_options(FedPavOptions, config).bn_buffers
    if value not in BN_BUFFER_MODES:
        raise ConfigError(f"{config.federation.method} option bn_buffers must be one of {', '.join(BN_BUFFER_MODES)}, "
                          f"got {value!r}")
    return value


FEDPAV = register(
    Method(
        name="fedpav",
        dp_sgd_support="yes",
        summary="FedPav: shared backbone averaged by data volume, local classifiers (paper 004, Alg. 1)",
        policy=CLASSIFIER_LOCAL,
        make_client_update=SupervisedUpdate,
        make_strategy=lambda config, model_config: DataVolumeAverage(bn_buffers(config)),
        needs_per_client_uploads=False,
        options=FedPavOptions,
        keeps_trained_model=True,
    )
)
