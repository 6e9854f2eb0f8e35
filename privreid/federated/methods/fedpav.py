"""FedPav: Federated Partial Averaging (Zhuang et al., paper 004, Algorithm 1).

* Policy: the backbone (and neck) is shared; the identity classifier, whose
  size depends on the client's identities, stays on the client (line 10, 14).
* Client update: E local epochs of SGD on the identity loss (line 11-13).
* Server: average of the uploads weighted by data volume ``n_k / n`` (line 7).
"""

from ..client import SupervisedUpdate
from ..policy import CLASSIFIER_LOCAL
from ..registry import Method, register
from ..strategy import DataVolumeAverage

FEDPAV = register(
    Method(
        name="fedpav",
        summary="FedPav: shared backbone averaged by data volume, local classifiers (paper 004, Alg. 1)",
        policy=CLASSIFIER_LOCAL,
        make_client_update=SupervisedUpdate,
        make_strategy=lambda config: DataVolumeAverage(),
    )
)
