"""privreid on Flower (flwr 1.41): multi-site training with the same methods as the in-process engine.

* :mod:`.server_app` — the ServerApp (``privreid.flower.server_app:app``): the
  engine's rounds with the clients' part dispatched to SuperNodes;
* :mod:`.client_app` — the ClientApp (``privreid.flower.client_app:app``): one
  site's client update and evaluations, by the engine's own client code;
* :mod:`.site` — a site's dataset and its local state (in its state directory);
* :mod:`.messages` — message contents, (de)serialisation, the privacy gate;
* :mod:`.deployment` — starting SuperLink / SuperNodes and submitting runs;
* :mod:`.loopback` — a one-process ``Grid`` for tests and benchmarks.

``privreid flower superlink | supernode | run`` drive a deployment; see docs/flower.md.
"""

from privreid.dependencies import require

require("flwr")  # without privreid[flower]: a one-line install hint (privreid flower ...), not a traceback
