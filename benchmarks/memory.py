"""Peak server memory against the number of clients (issue: memory flat in the number of clients).

Each run is ``privreid train --method M`` on the embedded synthetic federation
split by identity into 1, 3 or 9 clients per training domain (3, 9 or 27
clients in all), ResNet-18 at 32x16, one round of 2 steps per client and the
global model evaluated once at the end.  Every run is a fresh interpreter, so
its peak resident set size (``ru_maxrss`` of that process, read with
:mod:`resource` just before it exits) covers the whole run: imports, data,
model, training, aggregation and evaluation.

The ratio ``peak RSS(27 clients) / peak RSS(3 clients)`` is what matters: a
server that holds every upload of a round until it aggregates grows by one
shared state per client (45 MiB for ResNet-18); a streaming aggregate stays
flat.

Every linear strategy (the server folds the uploads into a running sum) is
measured by default: data-volume averaging (FedPav, FedAvg, FedProx, MOON,
DPPT over FedAvg), uniform averaging (FedReID, SKA) and FedPav with client
DP (the noisy mean of clipped updates).  An entry of ``--methods`` is a
method name, optionally followed by ``privreid train`` flags of its own
(``"fedpav --client-dp --clip 1 --noise-multiplier 1"``); the target is a ratio <= 1.15 for every entry.

    OMP_NUM_THREADS=1 python benchmarks/memory.py          # every linear strategy, 3 / 9 / 27 clients
    OMP_NUM_THREADS=1 python benchmarks/memory.py --methods "fedpav,moon"
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

#: every linear strategy (see the module docstring)
LINEAR = ("fedpav", "fedavg", "fedprox", "moon", "dppt", "fedreid", "ska",
          "fedpav --client-dp --clip 1 --noise-multiplier 1")
TARGET = 1.15

#: runs privreid's CLI in this interpreter and prints the process's peak RSS (KiB on Linux) last
_CHILD = """
import resource, sys
from privreid.cli import app
try:
    code = app(sys.argv[1:], standalone_mode=False)  # an error is an exit code here, not an exception
finally:
    print("MAXRSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)
sys.exit(code if isinstance(code, int) else 0)
"""


def peak_rss_mib(method: str, clients_per_domain: int, out: Path, extra: list[str]) -> float:
    cmd = [sys.executable, "-c", _CHILD, "train", "--method", method, "--protocol", "by-identity",
           "--num-clients", str(clients_per_domain), "--height", "32", "--width", "16", "--rounds", "1",
           "--max-steps", "2", "--batch-size", "8", "--eval-every", "1", "--seed", "0", "--quiet",
           "--overwrite", "--out", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    if proc.returncode != 0 or not (out / "summary.json").is_file():  # a run that did not finish measures nothing
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("MAXRSS")][-1]
    return int(line.split()[1]) / 1024


def _env() -> dict:
    import os

    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(LINEAR),
                    help="comma-separated entries: a method, optionally with its own train flags")
    ap.add_argument("--clients-per-domain", default="1,3,9", help="3 training domains: 3, 9, 27 clients")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--extra", default="", help="extra train flags for every entry, space separated")
    args = ap.parse_args()
    sizes = [int(v) for v in args.clients_per_domain.split(",")]
    entries = [e.strip() for e in args.methods.split(",") if e.strip()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, entry in enumerate(entries):
            method, *flags = shlex.split(entry)
            peaks = {}
            for k in sizes:
                peaks[3 * k] = peak_rss_mib(method, k, Path(tmp) / f"{n}-{k}", flags + args.extra.split())
                print(f"{entry:20s} {3 * k:3d} clients  peak RSS {peaks[3 * k]:8.0f} MiB", flush=True)
            lo, hi = min(peaks), max(peaks)
            rows.append({"method": entry, "peak_rss_mib": peaks, "ratio": peaks[hi] / peaks[lo]})
    print()
    print(f"{'method':20s} " + " ".join(f"{3 * k:>9d}" for k in sizes)
          + f"   ratio (max/min clients; target <= {TARGET})")
    for r in rows:
        verdict = "ok" if r["ratio"] <= TARGET else "NOT FLAT"
        print(f"{r['method']:20s} " + " ".join(f"{v:9.0f}" for v in r["peak_rss_mib"].values())
              + f"   {r['ratio']:.2f}x {verdict}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
