"""The cost of federation: a FedPav round against centralised training on the same optimiser steps.

The embedded synthetic federation (the ``make demo`` data: 3 seen clients,
1 unseen domain), ResNet-18 from scratch, batch 32, the default evaluation
cadence (after the last round only).  Both runs go through privreid's
engine (:class:`~privreid.federated.engine.FederatedEngine`) exactly as
``privreid train`` runs them:

``fedpav``        every round, each of the 3 clients loads the global model
                  and its own classifier, trains ``--steps`` steps on its
                  images, uploads; the server averages (FedPav) and writes
                  the checkpoint;
``centralized``   the 3 clients' images pooled into one training set,
                  ``3 x --steps`` steps per round on one model, checkpoint.

A round's time is the wall time between the ends of two consecutive rounds
(the first round, which builds the loaders' caches, and the last, which
ends with the evaluation, are not rounds of this comparison; the final
evaluation is reported apart: FedPav scores the global model and every
client's personalised model, centralised training its one model).  The
runs alternate, ``--repeats`` times each, and the median round is reported.
Target: fedpav / centralized <= 1.03.

    OMP_NUM_THREADS=1 python benchmarks/round_overhead.py
    OMP_NUM_THREADS=1 python benchmarks/round_overhead.py --height 128 --width 64 --steps 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

# Run from a checkout without installing privreid.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from privreid.config import DataConfig, ModelConfig, RunConfig, TrainConfig  # noqa: E402
from privreid.data.catalog import federation_for_config  # noqa: E402
from privreid.federated.engine import FederatedEngine  # noqa: E402

METHODS = ("fedpav", "centralized")
TARGET = 1.03


def run(method: str, args) -> dict:
    """One run of ``args.rounds`` rounds; the seconds of each round and of the final evaluation."""
    data = DataConfig(height=args.height, width=args.width)
    probe = RunConfig(data=data, train=TrainConfig(method="fedpav", device="cpu"))
    clients = len(federation_for_config(probe).clients)
    steps = args.steps * (clients if method == "centralized" else 1)
    config = RunConfig(data=data, model=ModelConfig(arch=args.arch),
                       train=TrainConfig(method=method, rounds=args.rounds, batch_size=args.batch,
                                         max_steps_per_epoch=steps, lr_backbone=0.05, lr_head=0.05,
                                         device="cpu", seed=0))
    assert config.train.eval_every == 0, "the benchmark measures the default cadence"
    with tempfile.TemporaryDirectory() as out:
        engine = FederatedEngine(config, federation_for_config(config), out, progress=False, log=lambda s: None)
        ends: list[float] = []
        evaluation: list[float] = []
        finish, evaluate = engine.finish_round, engine.evaluate_round

        def timed_finish(*a, **k):
            finish(*a, **k)
            ends.append(time.perf_counter())

        def timed_evaluate(*a, **k):
            start = time.perf_counter()
            evaluate(*a, **k)
            evaluation.append(time.perf_counter() - start)

        engine.finish_round, engine.evaluate_round = timed_finish, timed_evaluate
        engine.run()
    # rounds 2 .. R-1: neither the first (cold loaders) nor the last (evaluation)
    rounds = [b - a for a, b in zip(ends[:-2], ends[1:-1])]
    return {"rounds": rounds, "evaluation": sum(evaluation), "steps_per_round": steps * (1 if method ==
                                                                                          "centralized" else clients)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--arch", default="resnet18")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=4, help="optimiser steps per client per round")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per run (>= 3: rounds 2..R-1 are timed)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating runs per method")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.rounds < 3:
        ap.error("--rounds must be >= 3")
    threads = torch.get_num_threads()
    results = {m: {"rounds": [], "evaluation": [], "steps_per_round": 0} for m in METHODS}
    for _ in range(args.repeats):
        for method in METHODS:
            r = run(method, args)
            results[method]["rounds"] += r["rounds"]
            results[method]["evaluation"].append(r["evaluation"])
            results[method]["steps_per_round"] = r["steps_per_round"]
    print(f"ResNet ({args.arch}) at {args.height}x{args.width}, batch {args.batch}, {args.rounds} rounds x "
          f"{args.repeats} runs per method, default evaluation cadence; {threads} torch thread(s) "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")
    print(f"{'method':12s} {'steps/round':>11s} {'s/round':>8s} {'final eval s':>12s} {'threads':>8s}")
    for method, r in results.items():
        r["median_round"] = statistics.median(r["rounds"])
        r["median_evaluation"] = statistics.median(r["evaluation"])
        print(f"{method:12s} {r['steps_per_round']:11d} {r['median_round']:8.2f} {r['median_evaluation']:12.2f} "
              f"{threads:8d}")
    ratio = results["fedpav"]["median_round"] / results["centralized"]["median_round"]
    verdict = "meets" if ratio <= TARGET else "MISSES"
    print(f"fedpav round / centralized round on the same steps: {ratio:.3f} at {threads} thread(s) "
          f"({verdict} the {TARGET}x target)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": vars(args), "torch": torch.__version__, "threads": threads,
                       "machine": platform.processor() or platform.machine(), "results": results,
                       "fedpav_vs_centralized": ratio}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
