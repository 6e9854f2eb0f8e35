"""Training methods, federated and the non-federated baselines: one module each; importing this package registers them."""

from . import fedpav  # noqa: F401
from . import fedreid  # noqa: F401
from . import fedavg  # noqa: F401
from . import fedprox  # noqa: F401
from . import fedbn  # noqa: F401
from . import moon  # noqa: F401
from . import fedpav_variants  # noqa: F401
from . import fedarks  # noqa: F401
from . import ska  # noqa: F401
from . import dppt  # noqa: F401
from . import fednova  # noqa: F401
from . import centralized  # noqa: F401
from . import standalone  # noqa: F401
