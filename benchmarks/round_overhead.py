"""The cost of federation: a FedPav round against centralised training on the same optimiser steps.

The embedded synthetic federation (the ``make demo`` data: 3 seen clients,
1 unseen domain), ResNet-18 from scratch, batch 32, the default evaluation
cadence (after the last round only).  Both runs go through privreid's
engine (:class:`~privreid.federated.engine.FederatedEngine`) exactly as
``privreid train`` runs them:

``fedpav``        every round, each of the 3 clients loads the global model
                  and its own classifier, trains on its images, uploads
                  (and keeps its trained model in its memory file); the
                  server averages (FedPav) and writes the checkpoint;
``centralized``   the 3 clients' images pooled into one training set, as
                  many steps per round as the 3 clients take together, on
                  one model, checkpoint.

Two settings, both measured in one run and printed with their names:

``steps``   ``--steps`` optimiser steps per client per round (default 4),
            ``3 x --steps`` centralised steps: a short round, where the
            engine's fixed per-client costs weigh most;
``epoch``   one local epoch per client per round, as ``make demo``
            (``configs/demo-cpu.yaml``) trains: 42 + 38 + 38 = 118 FedPav
            steps against the 118 steps of one centralised epoch over the
            pooled images (the script computes both counts and checks that
            they are equal).

The two methods' engines run side by side in one process and their rounds
interleave (FedPav's round 1, centralised round 1, then centralised first
in round 2, and so on), so that a slow spell of a shared or virtual machine
hits both alike.  A round's time is the wall time of
:meth:`~privreid.federated.engine.FederatedEngine.run_round` (client
selection to checkpoint); the first round, which builds the loaders'
caches, and the last, which ends with the evaluation, are not rounds of
this comparison (the final evaluation is reported apart: FedPav scores the
global model and every client's personalised model, centralised training
its one model).  The reported ratio is the median over the round pairs of
FedPav's round over the centralised round of the same round number
(``--repeats`` runs of each setting, ``--epoch-repeats`` for the epoch
setting); the ratio of the two methods' median rounds is printed next to it.
Target: fedpav / centralized <= 1.03.

    OMP_NUM_THREADS=1 python benchmarks/round_overhead.py
    OMP_NUM_THREADS=1 python benchmarks/round_overhead.py --settings steps --height 128 --width 64 --steps 2
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

from privreid.config import (DataConfig, FederationConfig, ModelConfig, OptimConfig, RunConfig, RuntimeConfig)  # noqa: E402
from privreid.data.catalog import federation_for_config  # noqa: E402
from privreid.federated.engine import FederatedEngine  # noqa: E402
from privreid.composition import build_run

METHODS = ("fedpav", "centralized")
TARGET = 1.03


def epoch_steps(n: int, batch: int) -> int:
    """Optimiser steps of one epoch over ``n`` images (the client loader drops a last partial batch if ``n > batch``)."""
    return n // batch if n > batch else 1


def engine_for(method: str, args, steps: int | None, rounds: int, out: str) -> tuple[FederatedEngine, int]:
    """``method``'s engine for ``rounds`` rounds (``steps`` per client, ``None``: one local epoch); its steps a round."""
    data = DataConfig(height=args.height, width=args.width)
    probe = RunConfig(data=data, federation=FederationConfig(method="fedpav"), runtime=RuntimeConfig(device="cpu"))
    clients = federation_for_config(probe).clients
    per_client = [epoch_steps(len(c.train), args.batch) if steps is None else steps for c in clients]
    if method == "centralized":
        pooled = epoch_steps(sum(len(c.train) for c in clients), args.batch)
        max_steps = sum(per_client)
        if steps is None and max_steps != pooled:
            raise SystemExit(f"one centralised epoch is {pooled} steps, the clients' epochs {max_steps}: "
                             "the epoch setting would not compare the same number of steps")
        total = max_steps
    else:
        max_steps, total = steps, sum(per_client)
    config = RunConfig(data=data, model=ModelConfig(arch=args.arch),
                       federation=FederationConfig(method=method, rounds=rounds),
                       optim=OptimConfig(batch_size=args.batch, max_steps_per_epoch=max_steps, lr_backbone=0.05,
                                         lr_head=0.05),
                       runtime=RuntimeConfig(device="cpu", seed=0))
    assert config.evaluation.every == 0, "the benchmark measures the default cadence"
    engine = FederatedEngine(config, federation_for_config(config), out, progress=False, log=lambda s: None, build=build_run)
    engine.out_dir.mkdir(parents=True, exist_ok=True)
    return engine, total


def measure(args, steps: int | None, rounds: int, repeats: int) -> dict:
    """``repeats`` pairs of runs, the two methods' rounds interleaved; round times, pair ratios, final evaluation."""
    results = {m: {"rounds": [], "evaluation": [], "steps_per_round": 0} for m in METHODS}
    ratios: list[float] = []
    for repeat in range(repeats):
        with tempfile.TemporaryDirectory() as out:
            engines = {}
            for method in METHODS:
                engines[method], results[method]["steps_per_round"] = engine_for(
                    method, args, steps, rounds, os.path.join(out, method))
            evaluation = {m: _time_evaluation(e) for m, e in engines.items()}
            for r in range(rounds):
                order = METHODS if (r + repeat) % 2 == 0 else METHODS[::-1]
                took = {}
                for method in order:
                    start = time.perf_counter()
                    engines[method].run_round(r)
                    took[method] = time.perf_counter() - start
                # rounds 2 .. R-1: neither the first (cold loaders) nor the last (evaluation)
                if 0 < r < rounds - 1:
                    for method in METHODS:
                        results[method]["rounds"].append(took[method])
                    ratios.append(took["fedpav"] / took["centralized"])
            for method in METHODS:
                results[method]["evaluation"].append(sum(evaluation[method]))
    for r in results.values():
        r["median_round"] = statistics.median(r["rounds"])
        r["median_evaluation"] = statistics.median(r["evaluation"])
    return {"results": results, "pair_ratios": ratios, "fedpav_vs_centralized": statistics.median(ratios),
            "ratio_of_medians": results["fedpav"]["median_round"] / results["centralized"]["median_round"]}


def _time_evaluation(engine: FederatedEngine) -> list[float]:
    """Wrap ``engine.evaluate_round`` to record how long each evaluation takes (the list it appends to)."""
    spent: list[float] = []
    evaluate = engine.evaluate_round

    def timed(*a, **k):
        start = time.perf_counter()
        evaluate(*a, **k)
        spent.append(time.perf_counter() - start)

    engine.evaluate_round = timed
    return spent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--arch", default="resnet18")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--settings", default="steps,epoch", help="comma-separated: steps, epoch (see above)")
    ap.add_argument("--steps", type=int, default=4, help="optimiser steps per client per round (setting steps)")
    ap.add_argument("--rounds", type=int, default=8, help="rounds per run, setting steps (>= 3: rounds 2..R-1 "
                                                          "are timed)")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each method, setting steps")
    ap.add_argument("--epoch-rounds", type=int, default=4, help="rounds per run, setting epoch (>= 3)")
    ap.add_argument("--epoch-repeats", type=int, default=1, help="runs of each method, setting epoch")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    if not settings or set(settings) - {"steps", "epoch"}:
        ap.error("--settings takes steps and/or epoch")
    if min(args.rounds, args.epoch_rounds) < 3:
        ap.error("--rounds and --epoch-rounds must be >= 3")
    threads = torch.get_num_threads()
    plan = {"steps": (f"{args.steps} steps per client", args.steps, args.rounds, args.repeats),
            "epoch": ("one local epoch per client (configs/demo-cpu.yaml)", None, args.epoch_rounds,
                      args.epoch_repeats)}
    print(f"ResNet ({args.arch}) at {args.height}x{args.width}, batch {args.batch}, 3 clients, default evaluation "
          f"cadence; {threads} torch thread(s) (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")
    out = {}
    for name in settings:
        label, steps, rounds, repeats = plan[name]
        out[name] = {"setting": label, "rounds": rounds, "repeats": repeats, **measure(args, steps, rounds, repeats)}
    print(f"{'setting':8s} {'method':12s} {'steps/round':>11s} {'s/round':>8s} {'final eval s':>12s} "
          f"{'threads':>8s}")
    for name, o in out.items():
        for method, r in o["results"].items():
            print(f"{name:8s} {method:12s} {r['steps_per_round']:11d} {r['median_round']:8.2f} "
                  f"{r['median_evaluation']:12.2f} {threads:8d}")
    for name, o in out.items():
        ratio = o["fedpav_vs_centralized"]
        verdict = "meets" if ratio <= TARGET else "MISSES"
        print(f"setting {name} ({o['setting']}; {o['rounds']} rounds x {o['repeats']} run(s) per method, "
              f"{len(o['pair_ratios'])} timed round pairs): fedpav round / centralized round on the same steps, "
              f"median of the pairs: {ratio:.3f} (ratio of the medians {o['ratio_of_medians']:.3f}) at {threads} "
              f"thread(s) ({verdict} the {TARGET}x target)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": vars(args), "torch": torch.__version__, "threads": threads,
                       "machine": platform.processor() or platform.machine(), "settings": out}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
