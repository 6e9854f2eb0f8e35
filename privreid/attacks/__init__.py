"""Attacks used to *evaluate* models: what they leak and how robust they are.

* :mod:`privreid.attacks.retrieval` -- adversarial queries / gallery images
  against a ReID retrieval model (FGSM, PGD, BIM, MI-FGSM, TI-FGSM on top of
  torchattacks, with a feature-space loss).
* :mod:`privreid.attacks.inversion` -- gradient inversion (DLG, iDLG,
  Inverting Gradients) of what a client uploads to the server.
"""
