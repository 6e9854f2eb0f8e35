"""The built-in defenses, one module each; importing this package registers them (:mod:`..registry`).

Each module is light: the mechanism it wraps (Opacus, Flower's primitives)
is imported only when a run enables the defense.
"""

from privreid.defenses.dp_sgd import plugin as _dp_sgd  # noqa: F401
from privreid.defenses.client_dp import plugin as _client_dp  # noqa: F401
from privreid.defenses.beta_noise import plugin as _beta_noise  # noqa: F401
from privreid.defenses.secure_aggregation import plugin as _secure_aggregation  # noqa: F401
from privreid.defenses.robust import plugin as _robust  # noqa: F401
