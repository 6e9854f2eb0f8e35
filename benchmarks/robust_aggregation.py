"""The server's cost of robust aggregation: seconds per round of each robust rule against plain averaging.

One process, one set of uploads: ``--clients`` copies of the FedPav global
model (ResNet-18, privreid's default neck), each moved by its own Gaussian
update, aggregated by plain FedPav (data-volume mean, streamed) and by every
server defense of :mod:`privreid.defenses.robust_defenses` (Krum, Multi-Krum,
median, trimmed mean, Bulyan on Flower's functions; norm bounding, weak DP
around the plain mean).  Each is timed ``--repeats`` times; the table gives
the median and its ratio to plain averaging.  Local training is not timed:
it is the same under every rule.

    OMP_NUM_THREADS=1 python benchmarks/robust_aggregation.py             # 9 clients, f = 1
    OMP_NUM_THREADS=1 python benchmarks/robust_aggregation.py --clients 5 --repeats 3

The measured table is in docs/poisoning.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from privreid.config import RobustnessConfig, RunConfig
from privreid.defenses import apply_defenses
from privreid.federated.registry import get_method
from privreid.federated.strategy import Upload


def rules(f: int, clients: int) -> dict[str, dict]:
    """Label -> ``TrainConfig.defenses`` of every server defense (none: plain FedPav)."""
    return {"plain FedPav": {}, f"Krum (f={f})": {"robust-krum": {"f": f}},
            f"Multi-Krum (f={f}, keep={clients - f})": {"robust-krum": {"f": f, "keep": clients - f}},
            "median": {"robust-median": {}}, "trimmed mean (0.2)": {"robust-trimmed-mean": {"fraction": 0.2}},
            f"Bulyan (f={f})": {"robust-bulyan": {"f": f}}, "norm bounding": {"norm-bound": {"bound": 1.0}},
            "weak DP": {"weak-dp": {"bound": 1.0, "noise": 0.001}}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=9)
    ap.add_argument("--f", type=int, default=1, help="the number of malicious clients the rules assume")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    method = get_method("fedpav")
    global_state = {k: v.detach().clone() for k, v in method.build_model(RunConfig()).state_dict().items()}
    uploads = [Upload(f"c{i}", {k: v + 0.01 * torch.randn_like(v) if torch.is_floating_point(v) else v.clone()
                                for k, v in global_state.items()}, 100 + i) for i in range(args.clients)]
    values = sum(v.numel() for v in global_state.values() if torch.is_floating_point(v))
    print(f"{args.clients} uploads of {values / 1e6:.1f} M floating values (ResNet-18), median of "
          f"{args.repeats} aggregations, torch threads {torch.get_num_threads()}\n")
    print(f"| {'server aggregation':34s} | s / round | ratio |\n|{'-' * 36}|-----------|-------|")
    plain = None
    for label, defenses in rules(args.f, args.clients).items():
        config = RunConfig(robustness=RobustnessConfig(defenses=defenses))
        strategy = apply_defenses(method, config).strategy(config)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            strategy.aggregate(global_state, uploads)
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        plain = plain or seconds
        print(f"| {label:34s} | {seconds:9.2f} | {seconds / plain:5.1f} |", flush=True)


if __name__ == "__main__":
    main()
