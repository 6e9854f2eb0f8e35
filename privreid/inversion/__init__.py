"""Gradient inversion: how much a client's upload reveals of its training images.

* :mod:`.threat_models` -- what the server observes (full gradient, shared
  part only, the bottleneck's exact feature leak): a registry of :class:`ThreatModel` objects;
* :mod:`.defenses` -- beta white noise and DP clipping / noise on that view;
* :mod:`.labels` -- iDLG's rule (with its sign chosen by gradient matching), the bias-gradient sign rule, and
  the count rules for batches;
* :mod:`.optimise` -- DLG / iDLG / Inverting Gradients (a registry of :class:`InversionAttack` objects)
  and feature inversion;
* :mod:`.attack` -- one subject or one batch, end to end;
* :mod:`.report` -- metrics, ``metrics.json``, the PNG grid and the summary table.
"""

from privreid.lazy import lazy_exports

#: public name -> (module, attribute): imported on first use (privreid.lazy), so the CLI's --help needs no torch
_PUBLIC = {
    "Reconstruction": (".attack", "Reconstruction"),
    "reconstruct": (".attack", "reconstruct"),
    "reconstruct_batch": (".attack", "reconstruct_batch"),
    "Defense": (".defenses", "Defense"),
    "NO_DEFENSE": (".defenses", "NO_DEFENSE"),
    "defense_as_trained": (".defenses", "defense_as_trained"),
    "defend_gradient": (".defenses", "defend_gradient"),
    "bias_sign_label": (".labels", "bias_sign_label"),
    "idlg_label": (".labels", "idlg_label"),
    "bias_count_labels": (".labels", "bias_count_labels"),
    "norm_count_labels": (".labels", "norm_count_labels"),
    "matched_sign_label": (".labels", "matched_sign_label"),
    "INVERSION_ATTACKS": (".optimise", "INVERSION_ATTACKS"),
    "InversionAttack": (".optimise", "InversionAttack"),
    "InversionSettings": (".settings", "InversionSettings"),
    "MATCHES": (".settings", "MATCHES"),
    "PRESETS": (".settings", "PRESETS"),
    "register_inversion_attack": (".optimise", "register_inversion_attack"),
    "Observation": (".threat_models", "Observation"),
    "THREATS": (".threat_models", "THREATS"),
    "ThreatModel": (".threat_models", "ThreatModel"),
    "leak_bottleneck_feature": (".threat_models", "leak_bottleneck_feature"),
    "observe": (".threat_models", "observe"),
    "register_threat": (".threat_models", "register_threat"),
    "unregister_inversion_attack": (".optimise", "unregister_inversion_attack"),
    "unregister_threat": (".threat_models", "unregister_threat"),
}

__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
