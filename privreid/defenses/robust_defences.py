"""The old path of :mod:`privreid.defenses.robust_defenses` (identifiers spell "defense"); it goes in the next release."""

from privreid.renamed import renamed_module

from . import robust_defenses

renamed_module(__name__, robust_defenses)
