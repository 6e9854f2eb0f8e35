"""L2RW+ DPPT under camera independence on synthetic data: the Table VII ablation and the Table II comparison.

Camera independence (CI, paper 003 Sec. III-B): every camera of one training
dataset is a client; the global model is tested on that dataset's test split
("seen"; infrared queries against the visible gallery on visible-infrared
data) and, beyond the paper, on a dataset never trained on ("unseen").
Every row trains with the same data, seed, model, image size, rounds and
local losses; only the ``dppt`` options differ:

* Table VII (FedAvg): B (``L_id + L_cir``), B+CA, B+gray, B+CA+MRB (= I-DPPT);
* Table II: FedAvg / FedProx / MOON with ``L_id + L_cir`` (``base=...
  mrb=false ca=none``) and each "+I-DPPT" (``base=...`` with CA and MRB).

    python benchmarks/dppt_synthetic.py --out runs/dppt-vi         # synthetic VI, CI on viA, unseen viC
    python benchmarks/dppt_synthetic.py --out runs/dppt-rgb --data synth --protocol by-camera \
        --train-domains synthA --test-domains synthD --rounds 8           # RGB synthetic, cameras as clients
    python benchmarks/dppt_synthetic.py --quick      # 1 round, 2 steps, 32x16: a smoke run

The default data is the synthetic visible-infrared federation
(``synth-vi``: visible-only, infrared-only and dual cameras, identities
missing from some cameras), protocol ``ci``.  Runs are resumable: a row
whose ``summary.json`` exists is not retrained.  Writes ``table.md`` in
``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

#: run name -> dppt options (everything else is shared by all rows)
RUNS = {
    "fedavg-B": {"mrb": False, "ca": "none"},
    "fedavg-B+CA": {"mrb": False, "ca": "channel"},
    "fedavg-B+gray": {"mrb": False, "ca": "gray"},
    "fedavg-B+CA+MRB": {},
    "fedprox-B": {"base": "fedprox", "mrb": False, "ca": "none"},
    "fedprox-DPPT": {"base": "fedprox"},
    "moon-B": {"base": "moon", "mrb": False, "ca": "none"},
    "moon-DPPT": {"base": "moon"},
}
TABLE_VII = [("B", "fedavg-B"), ("B+CA", "fedavg-B+CA"), ("B+gray", "fedavg-B+gray"),
             ("B+CA+MRB (I-DPPT)", "fedavg-B+CA+MRB")]
TABLE_II = [("FedProx", "fedprox-B"), ("+I-DPPT", "fedprox-DPPT"), ("MOON", "moon-B"), ("+I-DPPT", "moon-DPPT"),
            ("FedAvg", "fedavg-B"), ("+I-DPPT", "fedavg-B+CA+MRB")]


def pct(summary: dict, key: str, metric: str) -> str:
    value = summary.get(key, {}).get(metric)
    return "-" if value is None else f"{100 * value:.1f}"


def table(rows: list[tuple[str, str]], summaries: dict[str, dict]) -> str:
    head = ["setting", "seen R1", "seen R10", "seen mAP", "seen mINP", "unseen R1", "unseen mAP", "MiB up+down",
            "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, run in rows:
        s = summaries[run]
        cells = [label, pct(s, "global_seen", "rank1"), pct(s, "global_seen", "rank10"),
                 pct(s, "global_seen", "mAP"), pct(s, "global_seen", "mINP"), pct(s, "global_unseen", "rank1"),
                 pct(s, "global_unseen", "mAP"), f"{(s['comm_bytes_up'] + s['comm_bytes_down']) / 2**20:.0f}",
                 f"{s['wall_time_s']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/dppt"))
    ap.add_argument("--data", action="append", help="dataset (repeatable; default: synth-vi)")
    ap.add_argument("--protocol", default="ci")
    ap.add_argument("--train-domains", default="viA", help="the CI dataset whose cameras are the clients")
    ap.add_argument("--test-domains", default="viC", help="held-out dataset (the 'unseen' columns)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--instances", type=int, default=4, help="K of the P x K batches")
    ap.add_argument("--lr", type=float, default=0.02, help="peak learning rate (backbone and head)")
    ap.add_argument("--runs", default=",".join(RUNS), help="comma-separated subset of: " + ", ".join(RUNS))
    ap.add_argument("--quick", action="store_true", help="1 round, 2 steps per epoch, 32x16 (smoke test)")
    args = ap.parse_args()
    common = ["--protocol", args.protocol, "--train-domains", args.train_domains, "--test-domains",
              args.test_domains, "--rounds", str(args.rounds), "--height", str(args.height), "--width",
              str(args.width), "--batch-size", str(args.batch_size), "--lr-backbone", str(args.lr), "--lr-head",
              str(args.lr), "--random-erasing", "0", "--eval-every", str(args.rounds), "--seed", "0", "--quiet"]
    if args.quick:
        common = ["--protocol", args.protocol, "--train-domains", args.train_domains, "--test-domains",
                  args.test_domains, "--rounds", "1", "--height", "32", "--width", "16", "--batch-size", "8",
                  "--max-steps", "2", "--quiet"]
    for data in args.data or ["synth-vi"]:
        common += ["--data", data]
    summaries = {}
    for run in args.runs.split(","):
        out = args.out / run
        if not (out / "summary.json").exists():
            opts = [f"{k}={json.dumps(v)}" for k, v in {"instances": args.instances, **RUNS[run]}.items()]
            cmd = [sys.executable, "-m", "privreid.cli", "train", "--method", "dppt", *common,
                   *[a for o in opts for a in ("--opt", o)], "--out", str(out), "--overwrite"]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        summaries[run] = json.loads((out / "summary.json").read_text())
    text = []
    for title, rows in (("Table VII-style ablation (FedAvg)", TABLE_VII), ("Table II-style CI comparison", TABLE_II)):
        rows = [(label, run) for label, run in rows if run in summaries]
        if rows:
            text += [f"### {title}", "", table(rows, summaries), ""]
    report = "\n".join(text)
    print(report)
    (args.out / "table.md").write_text(report)


if __name__ == "__main__":
    main()
