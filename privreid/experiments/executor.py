"""Many runs, one executor: one after another in this process (``local``) or as Ray Tune trials (``ray``).

Each run is an ordinary privreid run (:func:`privreid.training.train_run`, as ``privreid train``) into
``OUT/<run.name>/``, the source of truth; Tune's ``OUT/.tune/`` is bookkeeping only.  :func:`execute`:

* refuses bad settings and runs in one line before anything starts;
* writes the plan ``OUT/runs.json`` (:data:`privreid.experiments.status.PLAN_FILE`: every run, and the ``error:``
  line of each that failed), which ``privreid status OUT`` reads;
* skips finished runs (a readable ``summary.json``) and resumes interrupted ones from their checkpoints, so rerunning
  the command after a stop, a crash or ``kill -9`` of the driver trains no finished run again;
* retries a failing run ``retries`` times from its checkpoint, then records its one error line while the others go on;
* gives every run ``cpus_per_run`` torch threads under either executor, so its bits do not depend on the executor.

Ray is imported only for ``kind="ray"``: trials are ``tune.with_resources(..., {"cpu": C, "gpu": G})`` (fractional
GPUs pack runs on one device), at most ``max_concurrent`` at a time; ``RAY_ADDRESS`` joins a cluster, whose workers
must see ``OUT`` (a shared filesystem): a worker that cannot stops the sweep with one line saying so."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from privreid.config import RunConfig
from privreid.errors import ConfigError, PrivreidError
from privreid.experiments import status as sweep_status
from privreid.io import write_json_atomic

KINDS = ("local", "ray")
#: Tune's bookkeeping directory under OUT (replaced at every invocation; the run directories are the truth)
TUNE_DIR = ".tune"


@dataclass(frozen=True)
class PlannedRun:
    name: str                 # the run's directory name under OUT (unique, filesystem-safe, stable across reruns)
    config: RunConfig         # complete configuration, seed included
    cell: dict[str, Any]      # the grid values of this run (not the seed), e.g. {"privacy.beta": 0.1}
    seed: int


@dataclass(frozen=True)
class ExecutorSettings:
    kind: str = "local"       # "local" | "ray"
    max_concurrent: int = 1
    cpus_per_run: float = 1
    gpus_per_run: float = 0
    retries: int = 1

    @property
    def threads(self) -> int:
        """Torch threads per run, the same under either executor (whole CPUs, at least one)."""
        return max(1, int(self.cpus_per_run))

    def check(self) -> None:
        """One :class:`ConfigError` line for a setting out of range (before anything starts)."""
        if self.kind not in KINDS:
            raise ConfigError(f"--executor {self.kind!r}: choose local or ray")
        if self.max_concurrent < 1:
            raise ConfigError(f"--max-concurrent must be >= 1 (got {self.max_concurrent})")
        if not self.cpus_per_run > 0:
            raise ConfigError(f"--cpus-per-run must be > 0 (got {self.cpus_per_run})")
        if not self.gpus_per_run >= 0:
            raise ConfigError(f"--gpus-per-run must be >= 0 (got {self.gpus_per_run})")
        if self.retries < 0:
            raise ConfigError(f"--retries must be >= 0 (got {self.retries})")
        if self.kind == "local" and (self.max_concurrent != 1 or self.gpus_per_run):
            raise ConfigError("--max-concurrent and --gpus-per-run need --executor ray (local runs one at a time)")
        if self.kind == "ray":
            from privreid.dependencies import require

            require("ray", "--executor ray")


@dataclass
class RunOutcome:
    run: PlannedRun
    status: str               # "done" | "failed"
    summary: dict | None      # the run's summary.json (None when failed)
    error: str | None         # the one `error:` line when failed
    skipped: bool = False     # finished before this invocation (not trained again)


def check_runs(runs: list[PlannedRun]) -> None:
    """Refuse duplicate or unsafe run names, unknown methods and invalid configurations, in one line."""
    from privreid.federated.registry import METHODS

    seen: set[str] = set()
    for run in runs:
        if not run.name or run.name.startswith(".") or "/" in run.name or os.sep in run.name:
            raise ConfigError(f"run name {run.name!r}: not a plain directory name")
        if run.name in seen:
            raise ConfigError(f"two runs are named {run.name!r}: every run needs its own directory")
        seen.add(run.name)
        run.config.validate()
        if run.config.federation.method not in METHODS.names():
            raise METHODS.unknown(run.config.federation.method)


def one_line(exc: BaseException) -> str:
    """An exception as one ``error:`` line: privreid's own errors as they are, others with their type."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return text if isinstance(exc, PrivreidError) else f"{type(exc).__name__}: {text}".rstrip(": ")


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_one(run: PlannedRun, out: Path, retries: int, threads: int) -> tuple[str, str | None]:
    """Train ``run`` into ``out/run.name`` (resuming its checkpoint), retrying ``retries`` times: ``("done",
    None)`` or ``("failed", error line)``.  A stop by a signal is raised on, not retried."""
    from privreid import training

    run_dir = out / run.name
    error = None
    for _ in range(retries + 1):
        resume = (run_dir / "ckpt.pt").is_file()
        try:
            with torch_threads(threads):
                training.train_run(run.config, run_dir, resume=resume, overwrite=not resume and run_dir.exists(),
                                   progress=False)
            return "done", None
        except training.Stopped:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of one run is recorded; the sweep goes on
            error = one_line(exc)
    return "failed", error


def write_plan(out: Path, runs: list[PlannedRun], settings: ExecutorSettings, failed: dict[str, str]) -> None:
    write_json_atomic(out / sweep_status.PLAN_FILE, {
        "executor": settings.kind, "max_concurrent": settings.max_concurrent,
        "runs": [{"name": r.name, "cell": r.cell, "seed": r.seed, "rounds": r.config.federation.rounds} for r in runs],
        "failed": failed})


def execute(runs: list[PlannedRun], out: Path, settings: ExecutorSettings,
            *, progress: bool = True) -> list[RunOutcome]:
    """Train every run not finished yet (see the module's docstring); one outcome per run, in ``runs``' order."""
    settings.check()
    check_runs(runs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    failed: dict[str, str] = {}
    write_plan(out, runs, settings, failed)
    done = {r.name for r in runs if sweep_status.finished_summary(out / r.name) is not None}
    todo = [r for r in runs if r.name not in done]

    def record(name: str, status: str, error: str | None) -> None:  # called in this process, as outcomes arrive
        if status == "failed":
            failed[name] = error or "failed"
            write_plan(out, runs, settings, failed)

    if todo:
        with ProgressView(out, settings.max_concurrent, enabled=progress):
            if settings.kind == "local":
                for run in todo:
                    record(run.name, *run_one(run, out, settings.retries, settings.threads))
            else:
                _execute_on_ray(todo, out, settings, record)
    outcomes = []
    for run in runs:
        summary = sweep_status.finished_summary(out / run.name)
        outcomes.append(RunOutcome(run, "done" if summary is not None else "failed", summary,
                                   None if summary is not None else failed.get(run.name, "did not finish"),
                                   skipped=run.name in done))
    return outcomes


# --------------------------------------------------------------------------- Ray Tune
def _trial(config: dict, *, runs: dict[str, PlannedRun], out: str, cwd: str, retries: int, threads: int) -> dict:
    """One Tune trial: one run, trained where the driver's ``OUT`` is (which this worker must see), from the
    driver's working directory where this machine has it (relative data roots)."""
    if not (Path(out) / sweep_status.PLAN_FILE).is_file():
        return {"outcome": "unreachable", "host": socket.gethostname()}
    if os.path.isdir(cwd):
        os.chdir(cwd)
    status, error = run_one(runs[config["run"]], Path(out), retries, threads)
    return {"outcome": status, "error": error, "run": config["run"]}


def _execute_on_ray(runs: list[PlannedRun], out: Path, settings: ExecutorSettings, record) -> None:
    import shutil

    import ray
    from ray import tune

    if not ray.is_initialized():  # RAY_ADDRESS (a cluster) when set, else a local Ray on this machine
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)

    class Watch(tune.Stopper):
        """The driver's view of the results: records each outcome, stops every trial if a worker cannot see OUT."""

        unreachable: str | None = None

        def __call__(self, trial_id, result):
            if result.get("outcome") == "unreachable":
                self.unreachable = result.get("host", "?")
            elif result.get("outcome"):
                record(result["run"], result["outcome"], result.get("error"))
            return False

        def stop_all(self):
            return self.unreachable is not None

    watch = Watch()
    shutil.rmtree(out / TUNE_DIR, ignore_errors=True)
    trainable = tune.with_parameters(_trial, runs={r.name: r for r in runs}, out=str(out.resolve()),
                                     cwd=os.getcwd(), retries=settings.retries, threads=settings.threads)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": settings.cpus_per_run, "gpu": settings.gpus_per_run}),
        param_space={"run": tune.grid_search([r.name for r in runs])},
        tune_config=tune.TuneConfig(max_concurrent_trials=settings.max_concurrent, reuse_actors=True,
                                    trial_dirname_creator=lambda trial: trial.config["run"]),
        run_config=tune.RunConfig(storage_path=str(out.resolve()), name=TUNE_DIR, stop=watch, verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=settings.retries)))
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # Tune's legacy reporter is silent at verbose=0: one view
    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    grid = tuner.fit()
    if watch.unreachable is not None:
        raise ConfigError(f"a Ray worker on {watch.unreachable} cannot see --out {out.resolve()}: on a cluster "
                          f"--out must be on a filesystem every node mounts at the same path (docs/experiments.md)")
    for result in grid:  # a trial whose worker died past its retries has no outcome of its own
        if result.error is not None:
            record(result.config["run"], "failed", one_line(result.error))


# --------------------------------------------------------------------------- one progress view
class ProgressView:
    """One view over all runs while they train (not one bar per run): on a terminal one line redrawn every
    second (``8 runs: 3 done, 2 running, 3 queued, 0 failed; ETA 4m10s``); elsewhere a line when it changes.  It
    reads the run directories (:func:`privreid.experiments.status.collect`) from a thread, and writes to the stderr
    of the moment it starts (a run's ``log.txt`` tees the streams while it trains)."""

    def __init__(self, out: Path, concurrent: int, *, enabled: bool = True, interval: float = 1.0):
        self.out, self.concurrent, self.enabled, self.interval = out, concurrent, enabled, interval
        self.stream = sys.stderr
        self.tty = self.stream.isatty()
        self._stop = threading.Event()
        self._last = ""

    def draw(self, final: bool = False) -> None:
        try:
            line = sweep_status.summary_line(sweep_status.collect(self.out), self.concurrent)
        except Exception:  # noqa: BLE001 - a view never stops the sweep
            return
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if final else ""))
        elif line.split(";")[0] != self._last.split(";")[0] or final and line != self._last:
            self.stream.write(line + "\n")
        self._last = line
        self.stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.draw()

    def __enter__(self) -> "ProgressView":
        if self.enabled:
            self.draw()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            self.draw(final=True)
