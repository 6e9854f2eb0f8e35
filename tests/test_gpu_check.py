"""``benchmarks/gpu_check.sh --cpu-smoke``: the prepared GPU check runs end to end on the CPU, tiny.

Not marked slow (issue 42): the lent GPU's minutes are few, so every change that could break the script must fail
here first.  About two minutes of CPU time, most of it the processes' start (torch's import)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def test_cpu_smoke_prints_one_table_and_skips_missing_packages(tmp_path):
    """As on the lent GPU machine, opacus and flwr are missing: their rows say so, the others run, and the table
    lands in $OUT."""
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules.update(opacus=None, flwr=None)\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(blocker), "PRESETS": "0", "OUT": str(out),
           "OMP_NUM_THREADS": "1"}
    res = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--cpu-smoke"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    table = (out / "table.md").read_text()
    assert table.strip() in res.stdout
    rows = dict(line.strip("| ").split(" | ", 1) for line in table.splitlines()[4:] if line.startswith("|"))
    rows = {k.strip(): v.strip(" |") for k, v in rows.items()}
    assert "FAILED" not in table
    for precision in ("fp32", "bf16"):
        (value,) = [v for k, v in rows.items() if k.endswith(f"{precision}: img/s privreid / raw")]
        privreid, raw = (float(x) for x in value.split(" = ")[0].split(" / "))
        assert privreid > 0 and raw > 0
    for switch in ("channels-last", "cudnn.benchmark"):  # each measured off too (on in the rows above)
        (value,) = [v for k, v in rows.items() if k.endswith(f"fp32, {switch} off: img/s privreid / raw")]
        assert all(float(x) > 0 for x in value.split(" = ")[0].split(" / "))
    (value,) = [v for k, v in rows.items() if k.endswith("batch 16, fp32, lr 0.1 (0.05 x B/8): img/s privreid / raw")]
    assert all(float(x) > 0 for x in value.split(" = ")[0].split(" / "))  # the larger batch, its rate scaled
    (value,) = [v for k, v in rows.items() if k.endswith("batch 8, fp32, --compile, lr 0.05 (0.05 x B/8): img/s "
                                                         "privreid / raw")]
    measured, compiling = value.split("; compiling ")
    assert all(float(x) > 0 for x in measured.split(" = ")[0].split(" / "))
    assert all(float(x) >= 0 for x in compiling.removesuffix(" s").split(" / "))  # compiled, timed apart
    for name in ("host overhead ms/step, tiny model 64x32 batch 8", "evaluation resnet18 64x32 batch 8, flip: features/s",
                 "inversion ig resnet18 32x16: iterations/s"):
        (value,) = [v for k, v in rows.items() if k.startswith(name)]
        measured, ratio = value.split(" = ")
        assert all(float(x) > 0 for x in measured.split(" / ")) and float(ratio) > 0
    assert rows["peak GPU memory (MiB, max allocated)"] == "n/a (no CUDA)"
    assert rows["dp-sgd-step"] == "skipped (opacus not installed)"
    assert rows["secure-aggregation-round"] == "skipped (flwr not installed)"
    assert rows["inversion-2-iterations"].startswith("ok (")
    assert rows["FedPav round, 4 clients x 2 steps, sequential"].endswith("s/round (2 rounds, final evaluation included)")
    parallel = [v for k, v in rows.items() if "parallel K=2" in k]
    assert parallel in (["n/a (parallel clients not available)"], ["skipped (flwr not installed)"])
