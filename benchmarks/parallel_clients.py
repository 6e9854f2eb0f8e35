"""Seconds per FedPav round with the clients one after another and with K = 1 and K = 2 parallel clients (Ray).

Synthetic federations of 3 and of 4 clients (``--clients``): the embedded
synthetic data's generator (:func:`privreid.data.synthetic.ensure_synthetic`,
cached) with one domain more than clients, the last one held out as the
unseen test domain; 3 clients is the ``make demo`` federation itself, and the
4-client one adds a fourth domain of the same size.  ResNet-18 from scratch
at 64x32, batch 32, ``--steps`` optimiser steps per client per round
(default 4), one torch thread per client (this process runs at one thread,
and ``--parallel-clients`` gives each client the process's thread count).
For each federation, three runs of the same configuration and seed:

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
its rounds) is printed apart.  The three runs of a federation must end with
the same final metrics (the script checks ``summary.json``'s global and
local blocks are equal).  Target: sequential / K=2 >= 1.7.  The bound beside
it is the scheduling arithmetic: ``n`` equal clients on 2 single-thread
workers train in ``ceil(n / 2)`` waves, so a round's training can be at most
``n / ceil(n / 2)`` times faster: 1.5x for 3 clients, 2x for 4.

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

from privreid.config import (DataConfig, FederationConfig, ModelConfig, OptimConfig, RunConfig, RuntimeConfig)  # noqa: E402
from privreid.data.catalog import federation_for_config  # noqa: E402
from privreid.data.synthetic import SynthConfig, ensure_synthetic  # noqa: E402
from privreid.data.synthetic_config import domain_names  # noqa: E402
from privreid.federated.engine import FederatedEngine  # noqa: E402
from privreid.composition import build_run

TARGET = 1.7
#: the compared metric blocks of summary.json
FINAL_KEYS = ("global_seen", "global_unseen", "local_seen")
#: parallel workers of the K=2 runs: the bound's divisor
WORKERS = 2


def config_for(args, clients: int) -> RunConfig:
    """FedPav on a synthetic federation of ``clients`` seen domains and one unseen one."""
    synth = SynthConfig(num_domains=clients + 1)
    data = DataConfig(roots=[str(ensure_synthetic(config=synth))], test_domains=domain_names(synth)[-1:],
                      height=args.height, width=args.width)
    return RunConfig(data=data, model=ModelConfig(arch=args.arch),
                     federation=FederationConfig(method="fedpav", rounds=args.rounds),
                     optim=OptimConfig(batch_size=args.batch, max_steps_per_epoch=args.steps, lr_backbone=0.05,
                                       lr_head=0.05),
                     runtime=RuntimeConfig(device="cpu", seed=0))


def wave_bound(clients: int) -> float:
    """How much faster ``clients`` equal clients train on :data:`WORKERS` workers than one after another."""
    return clients / math.ceil(clients / WORKERS)


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


def measure(args, clients: int, out: str) -> dict:
    """The three runs on the federation of ``clients`` clients; their ratios and whether their metrics agree."""
    from privreid.flower.simulation import ParallelEngine

    config = config_for(args, clients)
    federation = federation_for_config(config)
    assert len(federation.clients) == clients
    quiet = {"progress": False, "log": lambda s: None}
    runs = {"sequential": timed_run(FederatedEngine(config, federation, os.path.join(out, f"{clients}-seq"),
                                                    **quiet, build=build_run))}
    for k in (1, 2):
        runs[f"K={k}"] = timed_run(ParallelEngine(config, federation, os.path.join(out, f"{clients}-k{k}"),
                                                  parallel_clients=k, **quiet, build=build_run))
    seq, k1, k2 = (runs[n]["median_round"] for n in ("sequential", "K=1", "K=2"))
    return {"clients": clients, "runs": runs, "seq_over_k2": seq / k2, "k1_over_k2": k1 / k2,
            "bound": wave_bound(clients), "same_final_metrics": all(r["final"] == runs["sequential"]["final"]
                                                                    for r in runs.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[3, 4], help="federation sizes to measure")
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
    if min(args.clients) < WORKERS:
        ap.error(f"--clients must be >= {WORKERS} (K=2 needs two clients a round)")

    torch.set_num_threads(1)
    print(f"FedPav, ResNet ({args.arch}) at {args.height}x{args.width}, batch {args.batch}, {args.steps} steps per "
          f"client, {args.rounds} rounds (2..{args.rounds - 1} timed); 1 torch thread per client; "
          f"{os.cpu_count()} CPU(s)")
    with tempfile.TemporaryDirectory() as out:
        results = [measure(args, clients, out) for clients in args.clients]
    print(f"{'clients':>7s} {'engine':12s} {'s/round':>8s} {'run s':>7s} {'outside rounds s':>17s}")
    for res in results:
        for name, r in res["runs"].items():
            print(f"{res['clients']:7d} {name:12s} {r['median_round']:8.2f} {r['wall']:7.1f} "
                  f"{r['outside_rounds']:17.1f}")
    for res in results:
        verdict = "meets" if res["seq_over_k2"] >= TARGET else "MISSES"
        print(f"{res['clients']} clients: sequential / K=2 {res['seq_over_k2']:.2f}x per round ({verdict} the "
              f"{TARGET}x target; the bound of {res['clients']} equal clients on {WORKERS} workers is "
              f"{res['bound']:.2f}x), K=1 / K=2 {res['k1_over_k2']:.2f}x; final metrics "
              f"{'identical' if res['same_final_metrics'] else 'DIFFER'} across the three runs")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": vars(args), "torch": torch.__version__, "machine": platform.processor() or
                       platform.machine(), "results": results}, fh, indent=2)
    return 0 if all(res["same_final_metrics"] for res in results) else 1


if __name__ == "__main__":
    sys.exit(main())
