"""What a model file loader read: one line for the command's output, a dict for the run's provenance."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


def _keys(keys: list[str], shown: int = 4) -> str:
    """``keys`` in a line: the first ``shown`` and how many more."""
    more = len(keys) - shown
    return ", ".join(keys[:shown]) + (f" (+{more} more)" if more > 0 else "")


@dataclass
class LoadReport:
    """What was loaded (``kind``, ``path``), mapped (``mapped``: key count, ``mapping``: how) and ignored (key: why).

    ``settings`` says where the input size, mean / std and retrieval feature
    came from (the file, or a default of a named convention).
    """

    kind: str
    path: str
    mapping: str
    mapped: int = 0
    ignored: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """One line: kind, path, mapped keys, ignored keys with the reason, input and feature settings."""
        parts = [f"loaded {self.kind} model {self.path}: {self.mapping}", f"{self.mapped} tensors mapped"]
        by_reason: dict[str, list[str]] = {}
        for key, reason in self.ignored.items():
            by_reason.setdefault(reason, []).append(key)
        parts += [f"ignored {_keys(keys)} ({reason})" for reason, keys in by_reason.items()]
        parts += [f"{name} {value}" for name, value in self.settings.items()]
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the run's provenance."""
        return asdict(self)
