"""How long ``privreid --help`` and every subcommand's ``--help`` take, as whole processes.

Each command line runs ``--repeats`` times in a fresh Python process
(``python -m privreid ... --help``), next to ``python -c pass`` (the
interpreter's own start-up, the floor); the table gives the median wall time
and its ratio to that floor.  The command tree is read from the CLI itself,
so a new command is measured without editing this script.

The CLI imports torch and the other heavy modules only when a command runs
(tests/test_cli_startup.py checks that no ``--help`` imports torch); this
script measures what is left.  It exits with status 1 when any help takes
longer than ``--limit`` seconds (0.5 by default, issue 28).

    python benchmarks/cli_startup.py                 # 5 repeats each
    python benchmarks/cli_startup.py --repeats 20 --limit 0.5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def command_lines() -> list[list[str]]:
    """``[]`` (``privreid`` itself) and the path of every command and subcommand of the CLI, in help order."""
    import typer

    from privreid.cli import app

    def walk(command, path: list[str]):
        yield path
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


def median_seconds(argv: list[str], repeats: int) -> float:
    """The median wall time of ``argv`` run ``repeats`` times (output discarded; a failure is an error)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="Runs of each command line (the median is shown).")
    parser.add_argument("--limit", type=float, default=0.5, help="Seconds any --help may take (exit 1 above).")
    args = parser.parse_args()

    floor = median_seconds([sys.executable, "-c", "pass"], args.repeats)
    rows = [("python -c pass", floor)]
    for path in command_lines():
        rows.append((" ".join(["privreid", *path, "--help"]),
                     median_seconds([sys.executable, "-m", "privreid", *path, "--help"], args.repeats)))

    width = max(len(name) for name, _ in rows)
    print(f"{'command':{width}s}  median s  x python -c pass")
    for name, seconds in rows:
        print(f"{name:{width}s}  {seconds:8.3f}  {seconds / floor:16.1f}")
    slow = [name for name, seconds in rows[1:] if seconds > args.limit]
    print(f"{len(rows) - 1} help screens, {args.repeats} run(s) each; slowest {max(s for _, s in rows[1:]):.3f} s; "
          + (f"over {args.limit} s: {', '.join(slow)}" if slow else f"all under {args.limit} s"))
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
