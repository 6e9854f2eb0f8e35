"""Seconds per FedPav round with the clients one after another and with K = 1 and K = 2 parallel clients (Ray).

The embedded synthetic federation (the ``make demo`` data: 3 seen clients,
1 unseen domain), ResNet-18 from scratch at 64x32, batch 32, ``--steps``
optimiser steps per client per round (default 4), one torch thread per
client (this process runs at one thread, and ``--parallel-clients`` gives
each client the process's thread count).  Three runs of the same
configuration and seed:

``sequential``  the in-process engine (:class:`~privreid.federated.engine.FederatedEngine`),
                ``privreid train`` without ``--parallel-clients``;
``K=1``         :class:`~privreid.flower.simulation.ParallelEngine` with one
                client at a time on Flower's simulation engine (Ray): the
                cost of the runtime itself;
``K=2``         the same with two clients at a time, on this machine's 2 cores.

A round's time is the wall time of ``run_round`` (selection to checkpoint).
Round 1 is warm-up (Ray's workers build the run's engine and data on their
first message; the in-process engine builds its loaders' caches) and the
last round ends with the evaluation, so rounds 2 .. R-1 are timed and their
median reported; Ray's start-up and shut-down (the run's wall time outside
its rounds) is printed apart.  The runs must end with the same final
metrics (the script checks ``summary.json``'s global and local blocks are
equal).  Target: sequential / K=2 >= 1.7.  With 3 equal clients and 2
single-thread workers a round trains ceil(3 / 2) = 2 clients' worth of work
one after another, so the training part of a round can be at most
3 / 2 = 1.5x faster; the script prints that bound beside the measurement.

    OMP_NUM_THREADS=1 python benchmarks/parallel_clients.py
"""

from __future__ import annotations

import argparse
import json
import math
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

TARGET = 1.7
#: the compared metric blocks of summary.json
FINAL_KEYS = ("global_seen", "global_unseen", "local_seen")


def config_for(args) -> RunConfig:
    return RunConfig(data=DataConfig(height=args.height, width=args.width), model=ModelConfig(arch=args.arch),
                     train=TrainConfig(method="fedpav", rounds=args.rounds, batch_size=args.batch,
                                       max_steps_per_epoch=args.steps, lr_backbone=0.05, lr_head=0.05,
                                       device="cpu", seed=0))


def timed_run(engine: FederatedEngine) -> dict:
    """Run ``engine``; the time of each round, the run's wall time, and its summary."""
    rounds: list[float] = []
    run_round = engine.run_round

    def timed(r):
        start = time.perf_counter()
        ok = run_round(r)
        rounds.append(time.perf_counter() - start)
        return ok

    engine.run_round = timed
    start = time.perf_counter()
    summary = engine.run()
    wall = time.perf_counter() - start
    timed_rounds = rounds[1:-1]
    return {"rounds": rounds, "median_round": statistics.median(timed_rounds), "wall": wall,
            "outside_rounds": wall - sum(rounds), "final": {k: summary.get(k) for k in FINAL_KEYS}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--arch", default="resnet18")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=4, help="optimiser steps per client per round")
    ap.add_argument("--rounds", type=int, default=6, help="rounds per run (>= 3: rounds 2..R-1 are timed)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.rounds < 3:
        ap.error("--rounds must be >= 3")
    from privreid.flower.simulation import ParallelEngine

    torch.set_num_threads(1)
    config = config_for(args)
    federation = federation_for_config(config)
    clients = len(federation.clients)
    print(f"FedPav, ResNet ({args.arch}) at {args.height}x{args.width}, batch {args.batch}, {clients} clients x "
          f"{args.steps} steps, {args.rounds} rounds (2..{args.rounds - 1} timed); 1 torch thread per client; "
          f"{os.cpu_count()} CPU(s)")
    runs = {}
    with tempfile.TemporaryDirectory() as out:
        runs["sequential"] = timed_run(FederatedEngine(config, federation, os.path.join(out, "seq"), progress=False,
                                                       log=lambda s: None))
        for k in (1, 2):
            runs[f"K={k}"] = timed_run(ParallelEngine(config, federation, os.path.join(out, f"k{k}"),
                                                      parallel_clients=k, progress=False, log=lambda s: None))
    same = all(r["final"] == runs["sequential"]["final"] for r in runs.values())
    print(f"{'engine':12s} {'s/round':>8s} {'run s':>7s} {'outside rounds s':>17s}")
    for name, r in runs.items():
        print(f"{name:12s} {r['median_round']:8.2f} {r['wall']:7.1f} {r['outside_rounds']:17.1f}")
    seq, k1, k2 = (runs[n]["median_round"] for n in ("sequential", "K=1", "K=2"))
    bound = clients / math.ceil(clients / 2)
    verdict = "meets" if seq / k2 >= TARGET else "MISSES"
    print(f"sequential / K=2: {seq / k2:.2f}x per round (K=1 / K=2: {k1 / k2:.2f}x; {verdict} the {TARGET}x target; "
          f"the training part of a round can gain at most {bound:.2f}x with {clients} equal clients on 2 workers); "
          f"final metrics {'identical' if same else 'DIFFER'} across the three runs")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": vars(args), "torch": torch.__version__, "machine": platform.processor() or
                       platform.machine(), "runs": runs, "same_final_metrics": same}, fh, indent=2)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
