"""What ``--resume`` accepts: the checkpoint's configuration, bar settings that do not change results.

``rounds`` may grow (continue a finished run) but not fall below the rounds completed.  ``device`` may change
between spellings of the same device (``auto`` without CUDA is ``cpu``); ``num_workers`` and ``eval_every`` may
change freely (every round's randomness is seeded afresh from the seed and the round,
:func:`privreid.seeding.derive_seed`, so an evaluation between rounds does not change what the next round trains)."""

from __future__ import annotations

from pathlib import Path

from privreid.checkpoint import Checkpoint
from privreid.config import RunConfig
from privreid.errors import ConfigError
from privreid.rundir import PROVENANCE_FILES

#: fields a resume may change freely
FREE_FIELDS = ("federation.rounds", "runtime.num_workers", "runtime.device", "evaluation.every")


def check_resume(saved: RunConfig, current: RunConfig, rounds_done: int) -> None:
    """Raise :class:`ConfigError` naming every field where ``current`` differs from the checkpoint's ``saved``."""
    from privreid.device import resolve_device

    if current.federation.rounds < rounds_done:
        raise ConfigError(f"--resume: the checkpoint has completed {rounds_done} rounds; --rounds "
                          f"{current.federation.rounds} would end before it (give --rounds {rounds_done} or more)")
    a, b = saved.to_dict(), current.to_dict()
    for section, name in (path.split(".") for path in FREE_FIELDS):
        a[section].pop(name), b[section].pop(name)
    diffs = [f"{section}.{k} {a[section].get(k)!r} -> {b[section][k]!r}"
             for section in b for k in b[section] if b[section][k] != a[section].get(k)]
    if resolve_device(saved.runtime.device).type != resolve_device(current.runtime.device).type:
        diffs.append(f"runtime.device {saved.runtime.device!r} -> {current.runtime.device!r}")
    if diffs:
        raise ConfigError(f"--resume: configuration differs from the checkpoint's ({', '.join(diffs)}); only "
                          f"{', '.join(FREE_FIELDS)} may change: `privreid train --out DIR --resume` alone "
                          "continues with the recorded configuration")


def resume_checkpoint(out: Path, config: RunConfig) -> Checkpoint | None:
    """The checkpoint ``--resume`` continues ``out`` from, loaded once and checked; ``None`` when the run stopped
    before its first checkpoint (nothing was done: it starts from round 0, :func:`restart_line`).

    Refused, before anything in ``out`` is written, when there is no run to resume, when a finished run lost its
    checkpoint, or when the checkpoint or its client-memory files are missing, unreadable, malicious, edited
    (:func:`privreid.checkpoint.check_fields`), changed or swapped (their recorded hashes), or of another
    configuration (:func:`check_resume`).  The memories are checked, not kept: the engine restores them lazily
    from this object (:meth:`~privreid.federated.engine.FederatedEngine.run`)."""
    if not (out / "ckpt.pt").exists():
        if (out / "summary.json").exists():
            raise ConfigError(f"--resume: {out} holds a finished run (summary.json) whose checkpoint "
                              f"{out / 'ckpt.pt'} is missing; restore it from a copy (--overwrite would discard "
                              "the run's metrics)")
        if not (out / "metrics.jsonl").exists() and not (out / PROVENANCE_FILES["config"]).is_file():
            raise ConfigError(f"--resume: no checkpoint at {out / 'ckpt.pt'}")
        return None
    return load_for_resume(out, config)


def load_for_resume(out: Path, config: RunConfig) -> Checkpoint:
    """``out/ckpt.pt`` loaded (its memory files hashed and read, left out) and checked against ``config``
    (:func:`check_resume`): the one load of a resume."""
    ckpt = Checkpoint.load(out / "ckpt.pt", client_memory=False, check_memory=True)
    check_resume(ckpt.run_config, config, ckpt.round)
    return ckpt


def restart_line(out: Path) -> str:
    """The one line a ``--resume`` of a run stopped before its first checkpoint prints (:func:`resume_checkpoint`
    returned ``None``): it starts from round 0."""
    return (f"--resume: {out} stopped before its first checkpoint; starting it from round 0 with its recorded "
            "configuration (nothing was done yet)")
