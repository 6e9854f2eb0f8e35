"""Where a sweep or a table stands, read from its directory alone (no Ray needed to look).

:func:`privreid.experiments.executor.execute` writes the plan, ``OUT/runs.json`` (every run's name, cell, seed and
rounds, and each failed run's ``error:`` line); the rest is read from the run directories ``OUT/<run>/``:

* done: ``summary.json`` (written last, atomically);
* running: its lock ``.privreid.lock`` is held (:class:`privreid.rundir.RunLock`);
* failed: named in the plan's failures and not running;
* queued: the rest (a run with a checkpoint resumes from it).

The round is the last one in ``metrics.jsonl``; the key metric the last global (else local) seen mAP; the ETA: the
rounds left times the seconds per round of the current attempt (from ``env.json``, rewritten at each start, to the
last ``metrics.jsonl`` record), else of the finished runs (``summary.json``'s ``wall_time_s``)."""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path
from typing import Any

from privreid.errors import ConfigError
from privreid.io import format_table
from privreid.rundir import LOCK_FILE

#: the plan of a sweep or a table, in its output directory
PLAN_FILE = "runs.json"
STATES = ("done", "running", "queued", "failed")
_RESUMED = re.compile(r"resuming \S+ from round (\d+)")


def read_plan(out: Path) -> dict[str, Any]:
    """``OUT/runs.json``; :class:`ConfigError` when ``out`` holds no sweep or table."""
    try:
        return json.loads((Path(out) / PLAN_FILE).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{out} holds no sweep or table ({PLAN_FILE} is missing): give the --out of "
                          f"`privreid sweep` or `privreid reproduce`") from None
    except (json.JSONDecodeError, OSError) as exc:
        raise ConfigError(f"{Path(out) / PLAN_FILE}: unreadable ({exc})") from None


def is_running(run_dir: Path) -> bool:
    """Whether a process holds the run's lock (a shared ``flock`` probe that leaves a free lock free)."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing the descriptor also drops a probe that got the lock
    return False


def finished_summary(run_dir: Path) -> dict | None:
    """The run's ``summary.json`` when it is complete (written last and atomically), else ``None``."""
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _records(run_dir: Path) -> list[dict]:
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return records


def _seen_map(records: list[dict]) -> float | None:
    for scope in ("global", "local"):
        seen = [r for r in records if r.get("scope") == scope and r.get("split") == "seen"]
        if any("mAP" in r for r in seen):
            last = max(r["round"] for r in seen)
            now = [r["mAP"] for r in seen if r["round"] == last and "mAP" in r]
            return sum(now) / len(now)
    return None


def _summary_map(summary: dict) -> float | None:
    for block in ("global_seen", "local_seen"):
        value = (summary.get(block) or {}).get("mAP")
        if value is not None:
            return value
    return None


def _seconds_per_round(run_dir: Path, round_: int) -> float | None:
    """This attempt's seconds per round: ``env.json`` (written at its start) to the last metrics record."""
    try:
        started = (run_dir / "env.json").stat().st_mtime
        last = (run_dir / "metrics.jsonl").stat().st_mtime
        log = (run_dir / "log.txt").read_text(errors="replace")
    except OSError:
        return None
    resumed = _RESUMED.findall(log)
    done = round_ - (int(resumed[-1]) if resumed else 0)
    return (last - started) / done if done > 0 and last > started else None


def run_status(out: Path, entry: dict[str, Any], failures: dict[str, str]) -> dict[str, Any]:
    """One row: ``run``, ``state``, ``round`` (done rounds), ``rounds``, ``mAP`` (seen), ``s/round``, ``error``."""
    run_dir = Path(out) / entry["name"]
    row: dict[str, Any] = {"run": entry["name"], "state": "queued", "round": 0, "rounds": entry.get("rounds"),
                           "mAP": None, "s/round": None, "error": None}
    summary = finished_summary(run_dir)
    if summary is not None:
        wall = summary.get("wall_time_s")
        rounds = summary.get("rounds") or row["rounds"]
        return row | {"state": "done", "round": rounds, "rounds": rounds, "mAP": _summary_map(summary),
                      "s/round": wall / rounds if wall and rounds else None}
    records = _records(run_dir)
    row["round"] = max((r.get("round", 0) for r in records), default=0)
    row["mAP"] = _seen_map(records)
    if is_running(run_dir):
        return row | {"state": "running", "s/round": _seconds_per_round(run_dir, row["round"])}
    if entry["name"] in failures:
        return row | {"state": "failed", "error": failures[entry["name"]]}
    return row


def collect(out: Path) -> list[dict[str, Any]]:
    """Every run of the sweep or table in ``out``, in plan order, with its ``eta_s`` (seconds; ``None`` unknown)."""
    plan = read_plan(out)
    rows = [run_status(out, entry, plan.get("failed", {})) for entry in plan["runs"]]
    known = [r["s/round"] for r in rows if r["s/round"]]
    typical = sum(known) / len(known) if known else None
    for r in rows:
        per_round = r["s/round"] or typical
        left = (r["rounds"] or 0) - r["round"]
        r["eta_s"] = 0.0 if r["state"] == "done" else (
            per_round * left if per_round is not None and r["state"] != "failed" else None)
    return rows


def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {state: sum(r["state"] == state for r in rows) for state in STATES}


def sweep_eta(rows: list[dict[str, Any]], concurrent: int) -> float | None:
    """Seconds until every unfinished run is done, the work left spread over ``concurrent`` runs at a time."""
    left = [r for r in rows if r["state"] in ("running", "queued")]
    if any(r["eta_s"] is None for r in left):
        return None
    return max([r["eta_s"] for r in left if r["state"] == "running"] + [sum(r["eta_s"] for r in left) /
                                                                         max(1, concurrent)], default=0.0)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else (
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s")


def summary_line(rows: list[dict[str, Any]], concurrent: int = 1) -> str:
    """``8 runs: 3 done, 2 running, 3 queued, 0 failed; ETA 4m10s``."""
    n = counts(rows)
    line = f"{len(rows)} runs: " + ", ".join(f"{n[s]} {s}" for s in STATES)
    if n["done"] + n["failed"] < len(rows):
        line += f"; ETA {duration(sweep_eta(rows, concurrent))}"
    return line


def render(rows: list[dict[str, Any]], concurrent: int = 1) -> str:
    """The status table (one row per run) and the summary line, as ``privreid status`` prints them."""
    table = [{"run": r["run"], "state": r["state"], "round": f"{r['round']}/{r['rounds'] or '?'}",
              "seen mAP": r["mAP"], "ETA": "-" if r["state"] in ("done", "failed") else duration(r["eta_s"]),
              **({"error": r["error"] or ""} if any(x["error"] for x in rows) else {})} for r in rows]
    return format_table(table) + "\n" + summary_line(rows, concurrent)
