"""How far the README's demo table moves with the seed and with the CPU's float kernels.

`make demo` trains a centralised and a FedPav model (configs/demo-cpu.yaml, seed 0, one torch thread) and
compares them.  Its digits depend on the seed and, on x86-64, on the kernels torch dispatches to: ATen's
vectorised kernels (``ATEN_CPU_CAPABILITY``), oneDNN's convolutions (``ONEDNN_MAX_CPU_ISA``) and MKL's BLAS
(``MKL_CBWR``).  This script runs the demo's two trainings and its clean comparison for every seed under every
kernel setting, one process at a time, and writes per cell the mean ± std, the range and n over all of them:

* ``native``: whatever the machine runs best (``torch.backends.cpu.get_cpu_capability()`` is recorded);
* ``avx2``: ATen, oneDNN and MKL forced to AVX2 (what a machine without AVX-512 runs).

    python benchmarks/demo_spread.py --seeds 0,1,2 --kernels native,avx2 --out runs/demo-spread

It writes ``spread.md`` (the table and each setting's own rows) and ``spread.json`` into ``--out``; a setting whose
``table.json`` is already there is not run again (rerun the command to continue after a stop).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: kernel setting -> environment variables that force it (``native``: none)
KERNELS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"},
}
METHODS = ("centralized", "fedpav")
COMPARE = """
import json, sys, torch
import privreid
rows = privreid.compare(sys.argv[1:3]).clean
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "rows": rows}))
"""


def setting_env(kernel: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KERNELS["avx2"]}
    return {**env, **KERNELS[kernel], "OMP_NUM_THREADS": "1"}


def run_setting(out: Path, kernel: str, seed: int, config: Path) -> dict:
    """Train the demo's two models with ``seed`` under ``kernel`` and compare them: ``table.json``'s content."""
    where = out / f"{kernel}-seed{seed}"
    table = where / "table.json"
    if table.is_file():
        return json.loads(table.read_text())
    env = setting_env(kernel)
    privreid = [sys.executable, "-m", "privreid"]
    for method in METHODS:
        run = where / method
        if not (run / "summary.json").is_file():
            subprocess.run([*privreid, "train", "--method", method, "--config", str(config), "--seed", str(seed),
                            "--out", str(run), "--overwrite", "--quiet"], env=env, check=True)
    done = subprocess.run([sys.executable, "-c", COMPARE, *(str(where / m / "ckpt.pt") for m in METHODS)], env=env,
                          check=True, capture_output=True, text=True)
    result = {"kernel": kernel, "seed": seed, **json.loads(done.stdout.strip().splitlines()[-1])}
    table.write_text(json.dumps(result, indent=1))
    return result


def spread(results: list[dict]) -> list[dict]:
    """Per model and column: mean, std (n - 1), min, max and n over the settings (values in %)."""
    rows = []
    for i, first in enumerate(results[0]["rows"]):
        row = {"model": first["model"]}
        for column in (c for c in first if c != "model"):
            values = [100 * r["rows"][i][column] for r in results if r["rows"][i][column] is not None]
            row[column] = {"mean": statistics.fmean(values), "n": len(values), "min": min(values), "max": max(values),
                           "std": statistics.stdev(values) if len(values) > 1 else 0.0}
        rows.append(row)
    return rows


def markdown(rows: list[dict], results: list[dict]) -> str:
    columns = [c for c in rows[0] if c != "model"]
    lines = ["| model | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for row in rows:
        lines.append(f"| {row['model']} | " + " | ".join(
            f"{row[c]['mean']:.1f} ± {row[c]['std']:.1f} ({row[c]['min']:.1f}-{row[c]['max']:.1f})" for c in columns)
                     + " |")
    lines += ["", f"mean ± std (min-max) over n = {len(results)} runs: "
              + ", ".join(f"{r['kernel']} ({r['capability']}) seed {r['seed']}" for r in results), "",
              "Each run:", "", "| kernels | seed | model | " + " | ".join(columns) + " |",
              "|---" * (len(columns) + 3) + "|"]
    for r in results:
        for row in r["rows"]:
            lines.append(f"| {r['kernel']} ({r['capability']}) | {r['seed']} | {row['model']} | "
                         + " | ".join("-" if row[c] is None else f"{100 * row[c]:.1f}" for c in columns) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--kernels", default="native,avx2")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "demo-cpu.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "demo-spread")
    args = parser.parse_args(argv)
    kernels = args.kernels.split(",")
    if unknown := [k for k in kernels if k not in KERNELS]:
        parser.error(f"unknown kernel setting {unknown[0]!r} (known: {', '.join(KERNELS)})")
    seeds = [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for kernel in kernels:
        for seed in seeds:
            results.append(run_setting(args.out, kernel, seed, args.config))
            print(f"done: {kernel} seed {seed}", flush=True)
    rows = spread(results)
    (args.out / "spread.json").write_text(json.dumps({"spread": rows, "runs": results}, indent=1))
    text = markdown(rows, results)
    (args.out / "spread.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
