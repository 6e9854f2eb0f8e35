"""Training methods, federated and the non-federated baselines: one module each; importing this package registers them."""

from privreid.federated.methods import fedpav  # noqa: F401
from privreid.federated.methods import fedreid  # noqa: F401
from privreid.federated.methods import fedavg  # noqa: F401
from privreid.federated.methods import fedprox  # noqa: F401
from privreid.federated.methods import fedbn  # noqa: F401
from privreid.federated.methods import moon  # noqa: F401
from privreid.federated.methods import fedpav_variants  # noqa: F401
from privreid.federated.methods import fedarks  # noqa: F401
from privreid.federated.methods import ska  # noqa: F401
from privreid.federated.methods import dppt  # noqa: F401
from privreid.federated.methods import fednova  # noqa: F401
from privreid.federated.methods import centralized  # noqa: F401
from privreid.federated.methods import standalone  # noqa: F401
