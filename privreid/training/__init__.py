"""Train one run from a :class:`~privreid.config.RunConfig`: the shared path of ``privreid train`` and ``privreid sweep``.

The run's objects (method, defenses, adversary, deviations) are resolved once by :mod:`privreid.composition`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from privreid.config import RunConfig
from privreid.data.catalog import federation_for_config
from privreid.errors import PrivreidError, python_errors
from privreid.federated.engine import FederatedEngine
from privreid.federated.lr_schedule import lr_table
from privreid.io import write_json_atomic
from privreid.models.compilation import CompileClock, compile_line
from privreid.rundir import prepare_out_dir
from privreid.composition import build_run, method_of


#: ``privreid train``'s command lines and its flags that are no keyword of :func:`train_run`, in its errors
TRAIN_RUN_REWRITES = [
    (r"`privreid train --out DIR --resume` alone", "train_run(config, out, resume=True) with the recorded "
                                                   "configuration (Checkpoint.load(out / 'ckpt.pt').run_config)"),
    (r"privreid train --out (\S+) --resume", r"train_run(config, \1, resume=True)"),
    (r"privreid train --parallel-clients", "train_run(..., parallel_clients=K)"),
    (r"(?<![\w-])--rounds (\S+)", r"config.federation.rounds = \1"),
    (r"(?<![\w-])--rounds(?![\w-])", "config.federation.rounds"),
]


@python_errors(TRAIN_RUN_REWRITES)
def train_run(config: RunConfig, out: str | os.PathLike, *, overwrite: bool = False, resume: bool = False,
              progress: bool = True, echo: Callable[[str], None] | None = None, preset: dict | None = None,
              logger: str = "none", parallel_clients: int | None = None) -> dict[str, Any]:
    """Validate ``config``, build the federation and the engine, then train into ``out``; returns ``summary.json``.

    Everything is validated (config, method, data, model, ``out``, ``logger`` and, for ``resume``, the checkpoint and
    its configuration) before ``out`` is touched.  SIGINT and SIGTERM stop the run with one line naming the last
    checkpointed round and the ``--resume`` command (:func:`stop_on_signals`).  ``resume`` continues from
    ``out/ckpt.pt``; ``overwrite`` replaces a finished or partial run.  The run holds ``out``'s lock and writes its
    provenance (:func:`privreid.provenance.open_run`): ``preset`` is what ``config.yaml`` holds (``privreid train``'s
    options; default: the :class:`RunConfig`).  ``logger`` mirrors the metric records
    (:func:`privreid.provenance.metric_logger`).  ``summary.json``'s ``files`` block names every file of the run; with
    ``runtime.compile``, its ``compile_seconds`` the time spent compiling (:mod:`privreid.models.compilation`).
    ``parallel_clients`` trains up to that many clients of a round at once on Flower's simulation engine
    (:class:`privreid.flower.simulation.ParallelEngine`).  Its errors name these keywords (``overwrite=True``), where
    ``privreid train``'s name its flags.
    """
    from privreid.provenance import check_logger, metric_logger, open_run, provenance_files
    from privreid.rundir import check_output_dir

    from privreid.federated.resume import restart_line, resume_checkpoint

    check_run_flags(overwrite, resume)
    out = check_output_dir(Path(out))
    check_logger(logger)
    config.validate()
    if config.runtime.compile:
        check_compile_run(config, parallel_clients)
    method = method_of(config)
    # the one load of the checkpoint; None: stopped before its first checkpoint, so it starts from round 0
    ckpt = resume_checkpoint(out, config) if resume else None
    restart = resume and ckpt is None
    federation = federation_for_config(config, verify=True)
    if parallel_clients is None:
        engine = FederatedEngine(config, federation, out, progress=progress, build=build_run)
    else:
        from privreid.dependencies import require

        require("flwr", "privreid train --parallel-clients")
        require("ray")
        from privreid.flower.simulation import ParallelEngine

        engine = ParallelEngine(config, federation, out, parallel_clients=parallel_clients, progress=progress,
                                build=build_run)
    with open_run(out, "train", config=config.to_dict() if preset is None else preset, device=str(engine.device),
                  seed=config.runtime.seed, prepare=lambda d: prepare_out_dir(d, overwrite=overwrite or restart,
                                                                            resume=resume and not restart),
                  resumed=resume), stop_on_signals(out, config.federation.rounds):
        if restart:  # the engine's log, as its "resuming ... from round N" line
            engine.log(restart_line(out))
        if echo:
            echo(f"{config.federation.method}: {len(engine.clients)} client(s) [{', '.join(c.name for c in engine.clients)}], "
                 f"unseen: {', '.join(t.name for t in federation.unseen) or '-'}; {eval_cadence(config)}; writing {out}")
        mirror = metric_logger(logger, out, config, lr_table(config, method))
        if mirror is not None:
            engine.record_hooks.append(mirror)
        try:
            with CompileClock() as clock:
                summary = engine.run(resume=ckpt or False)
        except BrokenPipeError:  # stdout's reader left (`| head`): stop quietly (commands.common.run_or_exit)
            raise
        except OSError as exc:
            raise _write_failed(out, exc) from exc
        finally:
            if mirror is not None:
                mirror.close()
        if config.runtime.compile:
            engine.log(compile_line(clock.seconds))
            summary["compile_seconds"] = round(clock.seconds, 3)
        summary["files"] = {"checkpoint": str(out / "ckpt.pt"), "metrics": str(out / "metrics.jsonl"),
                            **provenance_files(out), **({"tensorboard": str(out / "tensorboard")}
                                                        if logger == "tensorboard" else {})}
        write_json_atomic(out / "summary.json", summary)
    return summary


class Stopped(PrivreidError):
    """The run was stopped by a signal; ``exit_code`` is the shell's (128 + the signal number)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@contextmanager
def stop_on_signals(out: Path, rounds: int) -> Iterator[None]:
    """Turn SIGINT and SIGTERM during the block into :class:`Stopped`, whose one line says in which of the
    ``rounds`` rounds it stopped, which round's checkpoint is kept and the command that continues the run (it
    reaches stderr and, through :func:`privreid.provenance.run_log`, ``log.txt``).  Outside the main thread (no
    signal handlers there) the block runs as it is."""
    import signal

    from privreid.signals import Signalled, raising_signals

    try:
        with raising_signals(signal.SIGINT, signal.SIGTERM):
            yield
    except (Signalled, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Signalled) else signal.SIGINT
        kept = _kept_round(out)
        where = f"in round {(kept or 0) + 1} of {rounds}" if (kept or 0) < rounds else "after the last round"
        raise Stopped(f"stopped by {signal.Signals(signum).name} {where}; {_kept_checkpoint(out, kept)}",
                      128 + signum) from None


def _kept_round(out: Path) -> int | None:
    """The round of ``out``'s intact checkpoint; ``None`` if none was written."""
    from privreid.checkpoint import Checkpoint

    try:
        return Checkpoint.load(out / "ckpt.pt", client_memory=False).round
    except PrivreidError:
        return None


def _kept_checkpoint(out: Path, kept: int | None) -> str:
    """Which checkpoint of ``out`` (of round ``kept``) a stopped or failed run leaves, and the command that
    continues it, in words."""
    import shlex

    if kept is None:
        return "no checkpoint was written yet"
    return (f"the checkpoint of round {kept} ({out / 'ckpt.pt'}) is intact; continue with: "
            f"privreid train --out {shlex.quote(str(out))} --resume")


def check_compile_run(config: RunConfig, parallel_clients: int | None) -> None:
    """Refuse ``--compile`` where it cannot apply to a run (DP-SGD: :meth:`RunConfig.validate`): on a device
    without the inductor backend's tools (:func:`~privreid.models.compilation.check_compile`), and with
    ``--parallel-clients``, whose Ray workers would each compile their own model, their compile times out of
    ``summary.json``."""
    from privreid.device import resolve_device
    from privreid.errors import ConfigError
    from privreid.models.compilation import check_compile

    if parallel_clients is not None:
        raise ConfigError("--compile with --parallel-clients is not supported: every Ray worker would compile its "
                          "own copy of the model, and their compile times would not reach summary.json")
    check_compile(resolve_device(config.runtime.device))


def check_run_flags(overwrite: bool, resume: bool) -> None:
    """Refuse ``--overwrite`` with ``--resume`` (checked before anything is read or written)."""
    from privreid.errors import ConfigError

    if overwrite and resume:
        raise ConfigError("--overwrite and --resume exclude each other")


def eval_cadence(config: RunConfig) -> str:
    """The evaluation cadence in words, as ``privreid train`` prints it at the start of a run."""
    if config.evaluation.every == 0 or config.evaluation.every >= config.federation.rounds:
        return f"evaluating after the last round ({config.federation.rounds}) only"
    if config.evaluation.every == 1:
        return "evaluating after every round"
    return f"evaluating every {config.evaluation.every} rounds and after the last ({config.federation.rounds})"


def _write_failed(out: Path, exc: OSError) -> Exception:
    """A failed write (disk full ...) as one line saying which checkpoint is intact."""
    from privreid.rundir import os_error_message
    from privreid.io import OutputError

    return OutputError(f"{os_error_message(exc, out)}; {_kept_checkpoint(out, _kept_round(out))}")
