"""Test-time attacks on a ReID retrieval model: adversarial queries / gallery images.

* :mod:`privreid.retrieval_attacks.feature_attacks` -- FGSM, PGD, BIM, MI-FGSM, TI-FGSM on top of
  torchattacks, with a feature-space loss, in a registry (:data:`~.feature_attacks.RETRIEVAL_ATTACKS`);
* :mod:`privreid.retrieval_attacks.retrieval` -- a model evaluated under attack;
  :mod:`privreid.retrieval_attacks.campaign` -- ``privreid attack``'s campaign.
"""


import sys

#: the built-in retrieval attacks, one class each in :mod:`privreid.retrieval_attacks.feature_attacks` (a test keeps the two
#: equal), named here so that a command's help needs neither torch nor torchattacks
BUILTIN_RETRIEVAL_ATTACKS = ("fgsm", "pgd", "bim", "mifgsm", "tifgsm")


def retrieval_attack_names() -> list[str]:
    """The registered retrieval attacks (``privreid attack --method``): the registry's names once
    :mod:`privreid.retrieval_attacks.feature_attacks` is imported (a plugin that registers one imports it), else the
    built-ins, without importing torch for a help text."""
    registry = sys.modules.get("privreid.retrieval_attacks.feature_attacks")
    return registry.RETRIEVAL_ATTACKS.names() if registry is not None else list(BUILTIN_RETRIEVAL_ATTACKS)
