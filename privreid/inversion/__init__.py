"""Gradient inversion: how much a client's upload reveals of its training images.

* :mod:`.observation` -- the client's step and what its gradient leaks (the label, the bottleneck's input);
* :mod:`.threat_models` -- what the server observes (full gradient, shared
  part only, the bottleneck's exact feature leak): a registry of :class:`ThreatModel` objects;
* :mod:`.defenses` -- beta white noise and DP clipping / noise on that view;
* :mod:`.labels` -- iDLG's rule (with its sign chosen by gradient matching), the bias-gradient sign rule, and
  the count rules for batches;
* :mod:`.settings` -- an attack's settings and the registry of :class:`InversionAttack` objects;
* :mod:`.optimise` -- DLG / iDLG / Inverting Gradients (the built-in attacks) and feature inversion;
* :mod:`.attack` -- one subject or one batch, end to end;
* :mod:`.report` -- metrics, ``metrics.json``, the PNG grid and the summary table;
* :mod:`.campaign`, :mod:`.aggregate` -- ``privreid invert``'s campaigns (:func:`.campaign.invert_checkpoints`).
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
    "INVERSION_ATTACKS": (".settings", "INVERSION_ATTACKS"),
    "InversionAttack": (".settings", "InversionAttack"),
    "InversionSettings": (".settings", "InversionSettings"),
    "MATCHES": (".settings", "MATCHES"),
    "PRESETS": (".settings", "PRESETS"),
    "register_inversion_attack": (".settings", "register_inversion_attack"),
    "Observation": (".observation", "Observation"),
    "THREATS": (".threat_models", "THREATS"),
    "ThreatModel": (".threat_models", "ThreatModel"),
    "leak_bottleneck_feature": (".observation", "leak_bottleneck_feature"),
    "observe": (".threat_models", "observe"),
    "register_threat": (".threat_models", "register_threat"),
    "unregister_inversion_attack": (".settings", "unregister_inversion_attack"),
    "unregister_threat": (".threat_models", "unregister_threat"),
}

__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
