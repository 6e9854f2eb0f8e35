"""FedPav: Federated Partial Averaging (Zhuang et al., paper 004, Algorithm 1).

* Policy: the backbone (and neck) is shared; the identity classifier, whose
  size depends on the client's identities, stays on the client (line 10, 14).
* Client update: E local epochs of SGD on the identity loss (line 11-13).
* Server: average of the uploads weighted by data volume ``n_k / n`` (line 7).

Evaluation (Sec. 4.1): the global model, and each client's "local model",
"the specialized model trained after E local epochs in clients before
uploading to the server": its trained backbone with its classifier, which the
engine keeps in the client's memory (``keeps_trained_model``; one model copy
per client, as the authors' code keeps every client's model) and scores at
every evaluated round for every client (a client not selected yet: the global
model).  ``load_model(ckpt, client=NAME)`` returns it.
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
        needs_per_client_uploads=False,
        keeps_trained_model=True,
    )
)
