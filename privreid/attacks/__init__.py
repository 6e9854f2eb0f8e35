"""Attacks used to *evaluate* models: what they leak and how robust they are.

* :mod:`privreid.attacks.retrieval` -- adversarial queries / gallery images
  against a ReID retrieval model (FGSM, PGD, BIM, MI-FGSM, TI-FGSM on top of
  torchattacks, with a feature-space loss).
* :mod:`privreid.attacks.inversion` -- gradient inversion (DLG, iDLG,
  Inverting Gradients) of what a client uploads to the server.
"""


def retrieval_attack_names() -> list[str]:
    """The registered retrieval attacks (``privreid attack --method``, the registry of
    :mod:`privreid.attacks.feature_attacks`); none when torchattacks, which they run on, is not installed."""
    from ..errors import MissingDependencyError

    try:
        from .feature_attacks import ATTACKS
    except MissingDependencyError:
        return []
    return ATTACKS.names()
