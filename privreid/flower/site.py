"""One Flower site: its local dataset and its local state across rounds and runs.

A SuperNode is one site and one client, started with ``privreid flower supernode --data DIR``, which puts these
keys in ``--node-config`` (they never leave the machine): ``data`` (a root ``train --data`` accepts, holding one
dataset), ``format`` (default ``auto``), ``name`` (default the dataset's, the in-process name under
``by-dataset``, so seeds and results agree), ``state-dir``.

Local state (local keys and memory: MOON's previous model, the DP-SGD accountant ...) lives in ``state-dir``,
one file per run, so later messages, a resumed run and a restarted SuperNode continue from it. Not in Flower's
``context.state``: flwr 1.41 stores the updated ``Context`` with the ClientApp's last request, after the
reply, so the next message may start from the previous one (on a loaded machine a site scored its round-1
model after round 2). The file holds *versions* keyed by rounds completed: training round ``r`` (0-based)
starts from the newest ``<= r``, the evaluation after round ``r + 1`` scores the newest ``<= r + 1``; so a round
retrained after ``--resume`` starts from the same state, and the resumed run equals the uninterrupted one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from privreid.checkpoint import INTEGRITY_KEY, integrity_hash, save_checkpoint
from privreid.data.catalog import resolve_datasets
from privreid.data.partition import make_federation
from privreid.data.types import ClientData, Federation
from privreid.environment import cache_root
from privreid.errors import CheckpointError, DataError
from privreid.federated.policy import StateDict
from privreid.pickle_scan import safe_torch_load

NODE_DATA, NODE_FORMAT, NODE_NAME, NODE_STATE_DIR = "data", "format", "name", "state-dir"


def default_state_dir(name: str) -> Path:
    """``$PRIVREID_CACHE/flower-sites/<name>`` (``~/.cache/privreid`` when unset)."""
    return cache_root() / "flower-sites" / name


@dataclass
class Site:
    """A site's one client (its training split and seen-domain test split) and its state directory."""

    federation: Federation
    state_dir: Path

    @property
    def client(self) -> ClientData:
        return self.federation.clients[0]

    @classmethod
    def from_node_config(cls, node_config: dict[str, Any]) -> Site:
        """The site a SuperNode's ``--node-config`` describes; :class:`DataError` if it has no usable dataset."""
        data = node_config.get(NODE_DATA)
        if not data:
            raise DataError("this SuperNode has no dataset: start it with `privreid flower supernode --data DIR`")
        return cls.load(str(data), fmt=str(node_config.get(NODE_FORMAT, "auto")),
                        name=node_config.get(NODE_NAME) or None,
                        state_dir=node_config.get(NODE_STATE_DIR) or None)

    @classmethod
    def load(cls, data: str, *, fmt: str = "auto", name: str | None = None,
             state_dir: str | os.PathLike | None = None) -> Site:
        from privreid.data.catalog import parse_data_spec

        root = parse_data_spec(data).root  # DIR or DIR:FORMAT, as `privreid train --data`
        if root == "synth" or not Path(root).expanduser().is_dir():
            raise DataError(f"site dataset directory not found: {root}")
        datasets = resolve_datasets([data], fmt)
        if len(datasets) != 1:
            raise DataError(f"a site holds exactly one dataset; {data} holds {len(datasets)} "
                            f"({', '.join(datasets)}): pass one of them to --data")
        federation = make_federation(datasets, "by-dataset")
        if name:
            federation.clients[0] = replace(federation.clients[0], name=str(name))
        client_name = federation.clients[0].name
        return cls(federation, Path(state_dir).expanduser() if state_dir else default_state_dir(client_name))


class SiteState:
    """Versioned local state of one client for one run, in the site's state directory (module docstring)."""

    def __init__(self, site: Site, run_key: str):
        self.path = site.state_dir / f"{site.client.name}-{run_key}.pt"
        self.run_key, self.client = run_key, site.client.name

    def _versions(self) -> dict[int, dict[str, Any]]:
        """The file's versions, once its integrity hash, run and client are checked: a flipped byte or another
        client's (or run's) file copied over it is refused in one line naming the file, never trained on."""
        if not self.path.is_file():
            return {}
        payload = safe_torch_load(self.path)
        recorded = payload.pop(INTEGRITY_KEY, None) if isinstance(payload, dict) else None
        if ((recorded is not None and recorded != integrity_hash(payload)) or payload.get("run_key") != self.run_key
                or payload.get("client", self.client) != self.client or not isinstance(payload.get("versions"), dict)):
            raise CheckpointError(f"this site's state {self.path} is not the one it wrote for client {self.client} in "
                                  "this run (changed, truncated or another client's file); restore it from a copy "
                                  "or remove it to train the site afresh")
        return {int(k): v for k, v in payload["versions"].items()}

    def load(self, round_index: int) -> tuple[StateDict, dict] | None:
        """``(local state, memory)`` to start round ``round_index`` from; ``None`` before the first participation."""
        versions = self._versions()
        usable = [v for v in versions if v <= round_index]
        if not usable:
            return None
        entry = versions[max(usable)]
        return entry["local"], entry["memory"]

    def save(self, rounds_completed: int, local: StateDict, memory: dict) -> None:
        """Store the state after round ``rounds_completed``; keep only it and the newest older version."""
        versions = self._versions()
        versions[rounds_completed] = {"local": local, "memory": memory}
        keep = sorted(v for v in versions if v < rounds_completed)[-1:] + [rounds_completed]
        save_checkpoint({"run_key": self.run_key, "client": self.client,  # atomic, with an integrity hash
                         "versions": {v: versions[v] for v in keep}}, self.path)
