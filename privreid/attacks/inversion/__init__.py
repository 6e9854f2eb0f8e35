"""Gradient inversion: how much a client's upload reveals of its training images.

* :mod:`.threat_models` -- what the server observes (full gradient, shared
  part only, the bottleneck's exact feature leak): a registry of :class:`ThreatModel` objects;
* :mod:`.defences` -- beta white noise and DP clipping / noise on that view;
* :mod:`.labels` -- iDLG's rule (with its sign chosen by gradient matching) and the bias-gradient sign rule;
* :mod:`.optimise` -- DLG / iDLG / Inverting Gradients (a registry of :class:`InversionAttack` objects)
  and feature inversion;
* :mod:`.attack` -- one subject, end to end;
* :mod:`.report` -- metrics, ``metrics.json``, the PNG grid and the summary table.
"""

from .attack import Reconstruction, reconstruct
from .defences import NO_DEFENCE, Defence, defence_as_trained, defend_gradient
from .labels import bias_sign_label, idlg_label, matched_sign_label
from .optimise import (ATTACKS, MATCHES, InversionAttack, InversionSettings, register_inversion_attack,
                       unregister_inversion_attack)
from .threat_models import (THREATS, Observation, ThreatModel, leak_bottleneck_feature, observe, register_threat,
                            unregister_threat)

__all__ = [
    "ATTACKS",
    "MATCHES",
    "NO_DEFENCE",
    "THREATS",
    "Defence",
    "InversionAttack",
    "InversionSettings",
    "Observation",
    "Reconstruction",
    "ThreatModel",
    "bias_sign_label",
    "defence_as_trained",
    "defend_gradient",
    "idlg_label",
    "leak_bottleneck_feature",
    "matched_sign_label",
    "observe",
    "reconstruct",
    "register_inversion_attack",
    "register_threat",
    "unregister_inversion_attack",
    "unregister_threat",
]
