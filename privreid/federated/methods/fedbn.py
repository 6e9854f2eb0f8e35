"""FedBN+D: federated learning with local batch normalisation.

Li, Jiang, Zhang, Kamp & Dou, "FedBN: Federated Learning on Non-IID Features via Local Batch Normalization", ICLR
2021, Algorithm 1: clients train as in FedAvg, but the server averages every layer **except** the BatchNorm layers,
which each client keeps to itself; local BN absorbs the client's feature shift (here: its camera / domain style).

"+D" (SKA, paper 000, Table 2): the identity classifier is local as well.  SKA's "Baseline+LSN" (Table 4) is this
configuration.

Policy (:data:`FEDBN_POLICY`): local = the classifier plus **every** normalisation layer, its affine parameters
(``weight``, ``bias``) **and** its buffers (``running_mean``, ``running_var``, ``num_batches_tracked``), in the
backbone (``bn1``, each block's ``bnN``, each shortcut's ``downsample.1``) and in the neck (``neck.bn``).  Nothing
normalisation-related is uploaded or downloaded.  Keys are classified by name (:func:`is_norm_key`); a test checks the
rule against module inspection for every arch and neck.

Versus ``fedpav``: the client update and the server strategy (data-volume average) are FedPav's; only the policy
differs (FedPav shares and averages the BN layers, FedBN keeps them on the client), so uploads and downloads are
smaller by the norm layers' size and each client's personalised model has its own BN.

Personalised model (seen domains): the aggregated shared layers with the client's own norm layers and classifier, the
model the client holds after the round's aggregation (FedBN evaluates its local models after communication; SKA's
"Baseline+LSN", Table 4, the same numbers as FedBN+D in Table 2, is SKA's LS model after SelectUpdate).
``load_model(ckpt, client=NAME)`` returns it.

Global model for unseen domains (:func:`global_eval_state`).  FedBN has no global BN, so "the global model" on an
unseen domain needs a definition.  privreid uses the **uniform average of the clients' current norm layers** (affine
parameters and running statistics) on top of the aggregated shared layers: SKA Sec. 3.3's "simple solution ... to
average local specific normalisation layers at the end of model training".  Choices:

* uniform, not data-volume, weights: the hook sees only states, and for an unseen domain no source domain should
  dominate;
* ``running_var`` is averaged like every other float (what FedAvg/FedPav do to BN statistics), not the pooled-mixture
  variance (which would add the spread of the client means);
* ``num_batches_tracked`` (an integer, unused with BN's default momentum) is the maximum over the clients;
* the clients are those that have trained so far (with ``client_fraction < 1`` some states may be from earlier
  rounds).

This is an evaluation-time construct: it assumes the clients release their norm layers once to build a deployable
model; training never transmits them.
"""

from __future__ import annotations

import re

import torch

from privreid.models.reid_net import is_classifier_key
from privreid.federated.client import SupervisedUpdate
from privreid.federated.policy import ParameterPolicy, StateDict
from privreid.federated.registry import Method, register
from privreid.federated.strategy import DataVolumeAverage, is_norm_buffer

# a module path component that is a norm layer: ``bn``, ``bn1``, ``bn2``, ... or a
# shortcut's norm ``downsample.1`` (torchvision naming, see privreid.models.resnet)
_NORM_MODULE = re.compile(r"(?:^|\.)(?:bn\d*|downsample\.1)\.")


def is_norm_key(key: str) -> bool:
    """True for parameters and buffers of a normalisation layer of a :class:`~privreid.models.ReIDModel`."""
    return bool(_NORM_MODULE.search(key)) or is_norm_buffer(key)


FEDBN_POLICY = ParameterPolicy(
    is_local=lambda key: is_classifier_key(key) or is_norm_key(key),
    description="classifier and all normalisation layers (parameters and running statistics) local",
)


def global_eval_state(global_state: StateDict, client_states: dict[str, StateDict]) -> StateDict:
    """The aggregated shared state plus the uniform average of the clients' norm layers.

    Floating tensors are averaged in float64 and cast back; integer tensors
    (``num_batches_tracked``) take the maximum over the clients.
    """
    if not client_states:
        raise ValueError("FedBN has no normalisation layers to evaluate before any client has trained")
    names = sorted(client_states)
    keys = sorted(k for k in client_states[names[0]] if is_norm_key(k))
    for name in names[1:]:
        if sorted(k for k in client_states[name] if is_norm_key(k)) != keys:
            raise ValueError(f"client {name} holds a different set of normalisation keys")
    out: StateDict = dict(global_state)
    for key in keys:
        tensors = [client_states[name][key] for name in names]
        ref = tensors[0]
        if torch.is_floating_point(ref):
            out[key] = torch.stack([t.to(torch.float64) for t in tensors]).mean(0).to(ref.dtype)
        else:
            out[key] = torch.stack(tensors).max(0).values
    return out


FEDBN = register(
    Method(
        name="fedbn",
        dp_sgd_support="yes",
        summary="FedBN+D (Li et al. 2021): norm layers and classifiers local; global eval uses their mean",
        policy=FEDBN_POLICY,
        make_client_update=SupervisedUpdate,
        make_strategy=lambda config, model_config: DataVolumeAverage(),
        needs_per_client_uploads=False,
        global_eval_state=global_eval_state,
    )
)
