"""Train one run from a :class:`~privreid.config.RunConfig`: the shared path of ``privreid train`` and ``privreid sweep``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from .config import RunConfig
from .data.catalog import federation_for_config
from .federated.engine import FederatedEngine, prepare_out_dir
from .federated.registry import get_method


def train_run(config: RunConfig, out: str | os.PathLike, *, overwrite: bool = False, resume: bool = False,
              progress: bool = True, echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Validate ``config``, build the federation and the engine, then train into ``out``; returns ``summary.json``.

    Everything is validated (config, method, data, model) before ``out`` is
    touched.  ``resume`` continues from ``out/ckpt.pt``; ``overwrite``
    replaces a finished or partial run.
    """
    from .errors import ConfigError

    if overwrite and resume:
        raise ConfigError("--overwrite and --resume exclude each other")
    config.validate()
    get_method(config.train.method)
    out = Path(out)
    federation = federation_for_config(config, verify=True)
    engine = FederatedEngine(config, federation, out, progress=progress)
    prepare_out_dir(out, overwrite=overwrite, resume=resume)
    if echo:
        echo(f"{config.train.method}: {len(engine.clients)} client(s) [{', '.join(c.name for c in engine.clients)}], "
             f"unseen: {', '.join(t.name for t in federation.unseen) or '-'}; writing {out}")
    return engine.run(resume=resume)
