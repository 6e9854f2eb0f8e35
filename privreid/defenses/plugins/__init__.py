"""The built-in defences, one module each; importing this package registers them (:mod:`..registry`).

Each module is light: the mechanism it wraps (Opacus, Flower's primitives)
is imported only when a run enables the defence.
"""

from . import dp_sgd  # noqa: F401
from . import client_dp  # noqa: F401
from . import beta_noise  # noqa: F401
from . import secure_aggregation  # noqa: F401
from .. import robust_defenses  # noqa: F401
