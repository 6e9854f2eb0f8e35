"""Every training method on the same synthetic federation, with the same compute budget.

Each method trains with identical data, seed, model, image size, rounds and
local epochs (so the same number of local steps per client, except that
methods with C < 1 train fewer clients per round, as they do in their papers).
The table lists, per method: seen-domain R1 / mAP of the global model and of
the personalised (local) models, unseen-domain R1 / mAP, bytes communicated
and wall time.

    python benchmarks/methods_synthetic.py --out runs/methods --rounds 5
    python benchmarks/methods_synthetic.py --quick          # a 1-round smoke run

The runs are resumable: a method whose ``summary.json`` exists is not retrained.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def pct(summary: dict, key: str, metric: str) -> str:
    value = summary.get(key, {}).get(metric)
    return "-" if value is None else f"{100 * value:.1f}"


def main() -> None:
    from privreid.federated.registry import available_methods

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/methods"))
    ap.add_argument("--methods", default=",".join(available_methods()))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--quick", action="store_true", help="1 round, 2 steps per epoch, 32x16 (smoke test)")
    args = ap.parse_args()
    common = ["--rounds", str(args.rounds), "--height", str(args.height), "--width", str(args.width),
              "--lr-backbone", "0.05", "--lr-head", "0.05", "--eval-every", str(args.rounds), "--seed", "0",
              "--quiet"]
    if args.quick:
        common = ["--rounds", "1", "--height", "32", "--width", "16", "--max-steps", "2", "--quiet"]
    rows = []
    for method in args.methods.split(","):
        out = args.out / method
        if not (out / "summary.json").exists():
            cmd = [sys.executable, "-m", "privreid.cli", "train", "--method", method, *common, "--out", str(out),
                   "--overwrite"]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        s = json.loads((out / "summary.json").read_text())
        unseen = "global_unseen" if "global_unseen" in s else "local_unseen"  # standalone: mean over clients
        rows.append([method, pct(s, "global_seen", "rank1"), pct(s, "global_seen", "mAP"),
                     pct(s, "local_seen", "rank1"), pct(s, "local_seen", "mAP"),
                     pct(s, unseen, "rank1"), pct(s, unseen, "mAP"),
                     f"{(s['comm_bytes_up'] + s['comm_bytes_down']) / 2**20:.0f}", f"{s['wall_time_s']:.0f}"])
    head = ["method", "seen R1 (global)", "seen mAP (global)", "seen R1 (local)", "seen mAP (local)",
            "unseen R1", "unseen mAP", "MiB up+down", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    table = "\n".join(lines)
    print(table)
    (args.out / "table.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
