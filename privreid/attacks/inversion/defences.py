"""The old path of :mod:`privreid.attacks.inversion.defenses` (identifiers spell "defense"); it goes in the next release."""

from privreid.renamed import renamed_module

from . import defenses

renamed_module(__name__, defenses)
