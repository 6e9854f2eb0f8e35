"""Griffe extension for the API reference (mkdocs.yml): privreid's docstrings cross-reference with Sphinx roles
(``:func:`~privreid.api.evaluate```), which Markdown would print as they are; each becomes inline code of its
target (the last component after a ``~``, as Sphinx shows it)."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):`(~?)\.?([^`]+)`")


def _as_code(match: re.Match) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring griffe loads, before mkdocstrings parses it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_as_code, obj.docstring.value)
