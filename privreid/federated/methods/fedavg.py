"""FedAvg+D: Federated Averaging with decoupled identity classifiers.

McMahan, Moore, Ramage, Hampson & Agüera y Arcas, "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017, Algorithm 1: each selected client runs ``E`` epochs of minibatch SGD from the global
model, and the server sets ``w_{t+1} = sum_k (n_k / n) w^k_{t+1}`` over the selected clients (``n`` = their total
number of samples).

"+D" (SKA, paper 000, Table 2 caption): person ReID clients have disjoint identity label spaces, so the identity
classifier stays on its client.  Everything else in the ``state_dict`` is aggregated with the data-volume weights,
BatchNorm running statistics included (:func:`~privreid.federated.strategy.weighted_average`).

Versus ``fedpav``: **algorithmically the same.**  FedPav (paper 004, Algorithm 1) is exactly FedAvg with the
classifier kept local and data-volume weights; this module uses the very same policy
(:data:`~privreid.federated.policy.CLASSIFIER_LOCAL`), client update
(:class:`~privreid.federated.client.SupervisedUpdate`) and strategy
(:class:`~privreid.federated.strategy.DataVolumeAverage`), so with the same configuration and seed ``fedavg`` and
``fedpav`` train bit-identical global models (a test asserts it).  They differ in the personalised model scored on
seen domains: FedPav's paper scores each client's model after local training (paper 004 Sec. 4.1); here, as in SKA's
comparison (Table 4's "Baseline" row has FedAvg+D's numbers and is SKA's LS model after SelectUpdate with nothing
local but the classifier), it is the model the client holds after the round's aggregation, returned by
``load_model(ckpt, client=NAME)``.  SKA says the same ("'FedAvg+D' and 'FedPav' share the same principle but with
different hyper-parameters") without saying which differ; its common recipe (Sec. 4.2) uses learning rates 0.01 / 0.1
for backbone / classifier where FedPav uses 0.005 / 0.05.  privreid takes such values from the run configuration,
never from the method, so to reproduce a "FedAvg+D" row pass them explicitly.  The name lets result tables list the
baseline under the name the literature uses.
"""

from privreid.federated.client import SupervisedUpdate
from privreid.federated.policy import CLASSIFIER_LOCAL
from privreid.federated.registry import Method, register
from privreid.federated.strategy import DataVolumeAverage

FEDAVG = register(
    Method(
        name="fedavg",
        dp_sgd_support="yes",
        summary="FedAvg+D (McMahan et al. 2017) with local classifiers; algorithmically identical to fedpav",
        policy=CLASSIFIER_LOCAL,
        make_client_update=SupervisedUpdate,
        make_strategy=lambda config, model_config: DataVolumeAverage(),
        needs_per_client_uploads=False,
    )
)
