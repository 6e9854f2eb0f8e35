"""Stand-in for :mod:`privreid.experiments.executor` (H6a) until it is merged: the same names and signature, the
local executor only (one run after another in this process).  Delete it and import the executor instead."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privreid.config import RunConfig
from privreid.errors import ConfigError


@dataclass(frozen=True)
class PlannedRun:
    name: str
    config: RunConfig
    cell: dict[str, Any]
    seed: int


@dataclass(frozen=True)
class ExecutorSettings:
    kind: str = "local"
    max_concurrent: int = 1
    cpus_per_run: float = 1
    gpus_per_run: float = 0
    retries: int = 1


@dataclass
class RunOutcome:
    run: PlannedRun
    status: str
    summary: dict | None
    error: str | None
    skipped: bool = False


def execute(runs: list[PlannedRun], out: Path, settings: ExecutorSettings, *, progress: bool = True
            ) -> list[RunOutcome]:
    import json

    from privreid.training import train_run

    if settings.kind != "local":
        raise ConfigError(f"--executor {settings.kind}: only local runs until privreid.experiments.executor lands")
    outcomes = []
    for run in runs:
        run_dir = Path(out) / run.name
        if (run_dir / "summary.json").is_file():
            outcomes.append(RunOutcome(run, "done", json.loads((run_dir / "summary.json").read_text()), None, True))
            continue
        train_run(run.config, run_dir, resume=(run_dir / "ckpt.pt").is_file(), progress=False)
        outcomes.append(RunOutcome(run, "done", json.loads((run_dir / "summary.json").read_text()), None))
    return outcomes
