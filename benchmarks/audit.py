"""The cost of a membership audit against training the audited model once (a ratio), for K = 4 and 16 shadows.

Trains one FedPav run on a small synthetic federation, then times
``privreid audit`` on it: the ``loss`` + ``feature`` attacks (no shadows),
and LiRA (online and offline) with K shadow models, each a full training
run with the audited run's configuration (:mod:`privreid.auditing.shadows`),
for every K given.  Each K starts from an empty shadow cache.  The ratio is
audit wall time / training wall time; LiRA's is about K (shadow training)
plus the feature extraction of the target and the K shadows.

    python benchmarks/audit.py                   # K = 4 and 16, image level
    python benchmarks/audit.py --shadows 4 --rounds 2

Measured here (2-core CPU shared with other agents; one thread):

see the table printed by the script; docs/audit.md quotes it.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shadows", default="4,16", help="comma list of K")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--level", default="image")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from privreid.auditing import AuditSettings, run_audit
    from privreid.config import (DataConfig, EvaluationConfig, FederationConfig, ModelConfig, OptimConfig, RunConfig,
                                 RuntimeConfig)
    from privreid.data.synthetic import SynthConfig, generate_synthetic
    from privreid.training import train_run

    work = Path(tempfile.mkdtemp(prefix="privreid-bench-audit-"))
    try:
        root = generate_synthetic(work / "synth", SynthConfig(num_domains=3, ids_per_domain=10, test_ids_per_domain=6,
                                                              cams_per_domain=3, images_per_id_per_cam=2, height=32,
                                                              width=16, distractors=2, junk=2))
        cfg = RunConfig(data=DataConfig(roots=[str(root)], height=32, width=16, test_domains=["synthC"]),
                        model=ModelConfig(arch="resnet18", feat_dim=32),
                        federation=FederationConfig(method="fedpav", rounds=args.rounds),
                        optim=OptimConfig(batch_size=8, max_steps_per_epoch=4),
                        evaluation=EvaluationConfig(every=args.rounds),
                        runtime=RuntimeConfig(device="cpu"))
        start = time.perf_counter()
        train_run(cfg, work / "run", progress=False)
        train_s = time.perf_counter() - start
        rows = [("train the audited model once", train_s)]
        runs = [("loss + feature", ["loss", "feature"], 4)]
        runs += [(f"LiRA, K = {k}", ["lira"], k) for k in (int(v) for v in args.shadows.split(","))]
        for name, attacks, k in runs:
            out = work / f"audit-{len(rows)}"
            start = time.perf_counter()
            run_audit([work / "run" / "ckpt.pt"], out, AuditSettings(levels=[args.level], attacks=attacks,
                                                                      shadows=k, bootstrap=0), device="cpu")
            rows.append((name, time.perf_counter() - start))
        print(f"{'step':32s} {'wall s':>8s} {'x training':>10s}")
        for name, secs in rows:
            print(f"{name:32s} {secs:8.1f} {secs / train_s:10.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
