"""Provenance of a run directory: ``config.yaml``, ``env.json``, ``log.txt``, and metric mirrors.

Every command that writes a run directory records, through :func:`open_run` (with :mod:`privreid.rundir`'s
checks and lock): ``config.yaml``, the resolved configuration (for ``train`` a preset, :func:`train_preset`,
that ``--config`` reads back to the same :class:`~privreid.config.RunConfig`; otherwise the command's
parameters by option name); ``env.json`` (:func:`environment`: privreid's version and git commit, Python, the
versions of torch, CUDA, torchvision, Opacus, Flower, kornia, torchattacks, the platform, device, seed and
command line); ``log.txt`` (:func:`run_log`), appended to on ``--resume``. ``train --logger
tensorboard|wandb`` mirrors ``metrics.jsonl`` there (:func:`metric_logger`; TensorBoard also gets the learning
rate, the configuration and the hyperparameters)."""

from __future__ import annotations

import io
import json
import math
import os
import platform
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from privreid import __version__
from privreid.dependencies import require
from privreid.errors import ConfigError, PrivreidError
from privreid.io import write_text_atomic
from privreid.rundir import (PROVENANCE_FILES, OutputError, RunFiles, RunLock, check_no_links, check_output_dir,
                             check_run_kind, os_error_message, remove_orphaned_temporaries)

#: distributions whose versions env.json records (absent ones are ``null``)
PACKAGES = ("torch", "torchvision", "opacus", "flwr", "kornia", "torchattacks", "numpy", "tensorboard", "wandb")
#: ``privreid train`` options that say where and how to run, not what: left out of the train preset
NOT_CONFIG = ("config_file", "out", "overwrite", "resume", "quiet", "logger")


# --------------------------------------------------------------------------- env.json
def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """The commit of the git checkout privreid runs from (``+dirty`` with local changes); ``None`` otherwise."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head


def environment(*, device: str | None = None, seed: int | None = None) -> dict[str, Any]:
    """What ``env.json`` holds: versions, platform, device and seed."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "privreid": __version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: package_version(name) for name in PACKAGES},
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "cuda_available": cuda,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "device": device,
        "seed": seed,
        "float_kernels": float_kernels(),
        "command": command_line(),
    }


#: environment variables that choose the CPU kernels a float result comes from (README "The demo")
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "OPENBLAS_CORETYPE")


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else :func:`platform.processor`."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def float_kernels() -> dict[str, Any]:
    """What decides a CPU run's floats beyond seed and data, for ``env.json``: the kernels torch dispatches to
    (ATen's ``get_cpu_capability()``, ``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``, ``MKL_CBWR``, the threads)."""
    import torch

    return {
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "mkl": torch.backends.mkl.is_available(),
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "variables": {name: os.environ.get(name) for name in KERNEL_VARIABLES},
    }


def command_line() -> list[str]:
    """This process's command line as the user typed it (``privreid train ...``)."""
    return ["privreid", *sys.argv[1:]]


# --------------------------------------------------------------------------- config.yaml
def _plain(value: Any) -> Any:
    """A parameter value as YAML-safe plain data (paths as strings, tuples as lists)."""
    if isinstance(value, os.PathLike):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def option_name(param) -> str:
    """The long option name of a click parameter without dashes (``lr_backbone`` -> ``lr-backbone``)."""
    longs = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    return longs[0][2:] if longs else param.name.replace("_", "-")


def command_config(params: dict[str, Any] | None = None, *, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """The running click command's parameters (``params``: resolved values), keyed by option name."""
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return dict(_plain(params or {}))
    values = ctx.params if params is None else params
    return {option_name(p): _plain(values.get(p.name)) for p in ctx.command.params
            if p.name in values and p.name not in leave_out}


def train_preset(params: dict[str, Any]) -> dict[str, Any]:
    """``privreid train``'s resolved parameters as a preset that ``--config`` reads back (where/how left out)."""
    return command_config(params, leave_out=NOT_CONFIG)


def write_provenance(out: Path, command: str, *, config: dict[str, Any] | None = None, device: str | None = None,
                     seed: int | None = None, resumed: bool = False) -> None:
    """Write ``config.yaml`` and ``env.json`` into ``out``; ``config``, ``device``, ``seed`` default to the
    running command's. ``resumed``: ``env.json`` keeps the earlier starts' environments under ``previous``."""
    import click
    import yaml

    ctx = click.get_current_context(silent=True)
    params = ctx.params if ctx is not None else {}
    if config is None:
        config = command_config()
        if ctx is not None and ctx.args:
            config["passed-on"] = list(ctx.args)
    if device is None and isinstance(params.get("device"), str):
        from privreid.device import resolve_device

        device = str(resolve_device(params["device"]))
    seed = params.get("seed") if seed is None else seed
    header = (f"# privreid {command}: the resolved configuration of this run"
              + (f"; rerun it with `privreid {command} --config config.yaml --out DIR`" if command == "train" else
                 " (its parameters, by option name)") + "\n")
    env = {"kind": command, **environment(device=device, seed=seed)}  # the run's kind: privreid.rundir.run_kind
    if resumed:
        env["previous"] = _previous_environments(out / PROVENANCE_FILES["environment"])
    write_text_atomic(out / PROVENANCE_FILES["config"], header + yaml.safe_dump(config, sort_keys=False))
    write_text_atomic(out / PROVENANCE_FILES["environment"], json.dumps(env, indent=2) + "\n")


def _previous_environments(path: Path) -> list[dict[str, Any]]:
    """The environments of a run's earlier starts, from its ``env.json`` (none if absent or unreadable)."""
    try:
        env = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(env, dict):
        return []
    previous = env.pop("previous", [])
    return [*(previous if isinstance(previous, list) else []), env]


def provenance_files(out: Path) -> dict[str, str]:
    """role -> path of each provenance file present in ``out`` (for ``summary.json``)."""
    return {role: str(out / name) for role, name in PROVENANCE_FILES.items() if (out / name).exists()}


# --------------------------------------------------------------------------- the context of every run
@contextmanager
def open_run(out: str | os.PathLike, command: str, *, lock: bool = True, config: dict[str, Any] | None = None,
             device: str | None = None, seed: int | None = None, prepare=None, resumed: bool = False
             ) -> Iterator[Path]:
    """Check, create and (``lock``) lock ``out``, write its provenance, mirror the output to ``log.txt``.

    ``config``: ``config.yaml``'s content (default :func:`command_config`); ``prepare(out)`` runs under the lock
    before anything is written; ``resumed``: see :func:`write_provenance` and :func:`run_log`. A refused command
    leaves ``out`` as it found it: if the block fails before anything but the provenance changed, those files
    get their old bytes back (or are removed), with the folders (and ``out``) created here."""
    out = check_output_dir(out)
    check_run_kind(out, command)
    check_no_links(out)
    created = not out.exists()
    run_lock, failed = None, True
    before = RunFiles(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if lock:
            run_lock = RunLock(out).acquire()
            remove_orphaned_temporaries(out)
            before = RunFiles(out)
        if prepare is not None:
            prepare(out)
        write_provenance(out, command, config=config, device=device, seed=seed, resumed=resumed)
        with run_log(out, resumed=resumed):
            yield out
        failed = False
    except BrokenPipeError:  # stdout's reader left: not a fault of the run directory (commands.common.run_or_exit)
        raise
    except OSError as exc:
        raise OutputError(os_error_message(exc)) from exc
    finally:
        if failed and out.is_dir() and RunFiles(out).work == before.work:
            before.restore(out, remove_dir=created)
        if run_lock is not None:
            run_lock.release()


# --------------------------------------------------------------------------- log.txt
class _Tee(io.TextIOBase):
    """A text stream that writes to ``terminal`` and hands each finished line to ``log``: what a command printed
    (log records and progress bars reach ``log.txt`` and the terminal on their own)."""

    def __init__(self, terminal, log):
        self.terminal, self.log, self.pending = terminal, log, ""

    @property
    def encoding(self):
        return getattr(self.terminal, "encoding", "utf-8")

    @property
    def errors(self):
        return getattr(self.terminal, "errors", "strict")

    def isatty(self) -> bool:
        return self.terminal.isatty()

    def fileno(self) -> int:
        return self.terminal.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.terminal.write(text)
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.log(line)
        return len(text)

    def flush(self) -> None:
        self.terminal.flush()

    def finish(self) -> None:
        self.log(self.pending)
        self.pending = ""


@contextmanager
def run_log(out: Path, *, resumed: bool = False) -> Iterator[None]:
    """Write ``out/log.txt`` while the block runs: the ``privreid`` loggers' records, Python warnings, printed
    lines (``INFO`` stdout, ``WARNING`` stderr), and the line of the error that ends it, each with time and level.
    Appended to; ``resumed`` first writes ``--- resumed: <command> ---``."""
    import logging
    import shlex

    from privreid.log import LOGGER_NAME, file_handler, terminal

    handler = file_handler(out / PROVENANCE_FILES["log"])

    def write(level: int, line: str) -> None:
        """One line straight into log.txt (not to the console, which has it already or gets it otherwise)."""
        line = line.rsplit("\r", 1)[-1].rstrip()  # a line redrawn with \r: its last state
        if line.strip():
            handler.handle(logging.makeLogRecord({"msg": line, "levelno": level,
                                                  "levelname": logging.getLevelName(level)}))

    logger = logging.getLogger(LOGGER_NAME)
    level = logger.level
    if level == logging.NOTSET:  # a library user who set no level: log.txt still gets the information
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    if resumed:
        write(logging.INFO, f"--- resumed: {shlex.join(command_line())} ---")
    tees = [_Tee(sys.stdout, lambda line: write(logging.INFO, line)),
            _Tee(sys.stderr, lambda line: write(logging.WARNING, line))]
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = tees
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            shown = warnings.showwarning  # the console's (privreid.log.show_warning) or Python's own

            def show(message, category, filename, lineno, file=None, line=None):
                write(logging.WARNING, f"{category.__name__}: {message}")
                shown(message, category, filename, lineno, terminal(sys.stderr) if file is None else file, line)

            warnings.showwarning = show
            yield
    except PrivreidError as exc:
        write(logging.ERROR, str(exc))
        raise
    finally:
        for tee in tees:
            tee.finish()
        sys.stdout, sys.stderr = saved
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


# --------------------------------------------------------------------------- --logger
LOGGERS = ("none", "tensorboard", "wandb")


def record_scalars(rec: dict[str, Any]) -> tuple[int, dict[str, float]]:
    """A metric record as ``(round, {tag: value})``, tags like ``global/seen/synthA/rank1``; non-finite skipped."""
    prefix = "/".join(str(v) for k, v in rec.items() if k != "round" and isinstance(v, str))
    scalars = {f"{prefix}/{k}" if prefix else k: float(v) for k, v in rec.items()
               if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool)
               and math.isfinite(float(v))}
    return int(rec.get("round", 0)), scalars


class _TensorBoard:
    """Every metric record as scalars; each group's learning rate (``lr/backbone`` ...) once per round; the
    configuration as text (``config``) and, at the end, as TensorBoard hyperparameters (the HParams tab) with each
    evaluation metric's last value (``hparam/<tag>``)."""

    def __init__(self, out: Path, config, rates: dict[str, list[float]]):
        import yaml
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(out / "tensorboard"))
        self.config, self.rates, self.rounds, self.last = config, rates, set(), {}
        self.writer.add_text("config", "```yaml\n" + yaml.safe_dump(config.to_dict(), sort_keys=False) + "```")

    def __call__(self, rec: dict[str, Any]) -> None:
        step, scalars = record_scalars(rec)
        if step not in self.rounds and 1 <= step <= len(next(iter(self.rates.values()))):
            self.rounds.add(step)
            for group, rates in self.rates.items():
                self.writer.add_scalar(f"lr/{group}", rates[step - 1], global_step=step)
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, global_step=step)
            if rec.get("scope") in ("global", "local"):
                self.last[f"hparam/{tag}"] = value
        self.writer.flush()

    def close(self) -> None:
        self.writer.add_hparams(hparams(self.config.to_dict()), self.last, run_name=".")
        self.writer.close()


def hparams(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested configuration as TensorBoard hyperparameters (``{"optim.lr_backbone": 0.005, ...}``; lists and
    ``None`` as their text)."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(hparams(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return flat


class _WandB:
    def __init__(self, out: Path, config: dict[str, Any]):
        self.wandb = require("wandb")
        self.run = self.wandb.init(project="privreid", dir=str(out), name=out.name, config=config)

    def __call__(self, rec: dict[str, Any]) -> None:
        step, scalars = record_scalars(rec)
        self.run.log({**scalars, "round": step})

    def close(self) -> None:
        self.run.finish()


def metric_logger(kind: str, out: Path, config, rates: dict[str, list[float]]):
    """A callable mirroring each metric record of the run of ``config`` (a :class:`~privreid.config.RunConfig`)
    to ``kind`` (``none``: ``None``), with ``close()``; ``rates``: each learning-rate group's rate in every round
    (:func:`privreid.federated.lr_schedule.lr_table`)."""
    check_logger(kind)
    if kind == "tensorboard":
        return _TensorBoard(out, config, rates)
    if kind == "wandb":
        return _WandB(out, config.to_dict())
    return None


def check_logger(kind: str) -> None:
    """Refuse an unknown ``--logger`` or a missing package before any work is done."""
    if kind not in LOGGERS:
        raise ConfigError(f"--logger must be one of {', '.join(LOGGERS)}, got {kind!r}")
    if kind != "none":
        require(kind)


def record_models(out: Path, models: list) -> None:
    """``out/models.json``: what each model of an evaluation is (a privreid checkpoint's method and round, or a
    file from elsewhere's load report: kind, mapped and ignored keys, input settings)."""
    write_text_atomic(out / "models.json", json.dumps([m.provenance() for m in models], indent=2) + "\n")
