"""The cost of secure aggregation per round: bytes and wall time, with and without, in one run.

FedPav on the synthetic federation, in-process (:class:`privreid.federated.engine.FederatedEngine`),
the same configuration and seed twice: plain, then ``--secure-aggregation``
(SecAgg+ on Flower's primitives, :mod:`privreid.secagg.protocol`; default
settings: every client of the round holds a share, a majority reconstructs).

Per round:

* **bytes up**: plain, the uploads' raw tensors (float32 shared keys);
  secure, the masked vectors (4 bytes a value below the modulus ``2**32``,
  the quantised update plus the weight factor and privreid's saturation
  counter) plus the protocol's messages (public keys, encrypted Shamir
  shares, unmask shares); **bytes down**: the global model plus, secure,
  the keys and encrypted shares the server forwards;
* **wall time**: the whole round (local training included) and the server's
  aggregation alone (secure: every client's masking and the server's
  unmasking, run in this one process one after another, so it is the sum of
  what the clients and the server would spend).

Ratios are secure / plain, measured in the same process one after the other.

    python benchmarks/secagg.py                           # 3 clients, ResNet-18, 64x32, 2 rounds
    python benchmarks/secagg.py --domains 5 --rounds 3    # more clients a round

The Flower runtime (``privreid flower run --secure-aggregation``) is not
measured here; ``tests/test_secagg_deployment.py`` runs it on a loopback
deployment.

Measured here (2-core CPU shared with other agents; one thread; ResNet-18 at
64x32, 512-d neck, one local step of batch 16, 4 clients a round, 11.5 M
shared values; median of 2 rounds; ``python benchmarks/secagg.py``):

=========================  ==========  ==========  ======
per round                  plain       secure      ratio
=========================  ==========  ==========  ======
bytes up (4 clients)       183.21 MB   183.22 MB   1.00
bytes down                 183.21 MB   183.23 MB   1.00
round wall time            1.87 s      4.88 s      2.61
aggregation wall time      0.12 s      3.17 s      26.4
=========================  ==========  ==========  ======

The bytes barely move: a masked value takes 4 bytes like a float32, and the
protocol's keys and shares add about 9 KB up and 14 KB down a round.  The
time goes to the masks: each client expands one private and ``m - 1``
pairwise seeds into 11.5 M pseudo-random integers (Flower's
``pseudo_rand_gen``, numpy's Mersenne Twister), and the server one per
client to unmask, about 0.1 s each here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def run_once(root: Path, out: Path, *, secure: bool, args) -> dict:
    from privreid.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from privreid.data.catalog import federation_for_config
    from privreid.federated.engine import FederatedEngine
    from privreid.federated.policy import state_nbytes

    cfg = RunConfig(data=DataConfig(roots=[str(root)], height=args.height, width=args.width),
                    model=ModelConfig(arch=args.arch, feat_dim=512),
                    train=TrainConfig(method="fedpav", rounds=args.rounds, batch_size=16, max_steps_per_epoch=1,
                                      eval_every=10**6, device="cpu", secure_aggregation=secure))
    engine = FederatedEngine(cfg, federation_for_config(cfg), out, progress=False, log=lambda s: None)
    engine.evaluates = lambda round_no: False  # cost of training + aggregation only
    aggregate = engine.strategy.aggregate
    agg_times: list[float] = []

    def timed(global_state, uploads):
        t0 = time.perf_counter()
        result = aggregate(global_state, uploads)
        agg_times.append(time.perf_counter() - t0)
        return result

    engine.strategy.aggregate = timed
    round_times: list[float] = []
    finish = engine.finish_round

    def timed_round(round_index, uploads, down_bytes):
        finish(round_index, uploads, down_bytes)
        round_times.append(time.perf_counter() - starts[-1])

    engine.finish_round = timed_round
    starts: list[float] = []
    collect = engine.collect_uploads

    def timed_collect(round_index, selected):
        starts.append(time.perf_counter())
        return collect(round_index, selected)

    engine.collect_uploads = timed_collect
    engine.run()
    recs = [r for r in engine.metrics if r["scope"] == "secagg"]
    per_round = []
    for i, comm in enumerate(engine.comm):
        if secure:
            rec = recs[i]
            up = rec["masked_bytes_per_client"] * rec["clients"] + rec["protocol_bytes_up"]
            down = comm["bytes_down"] + rec["protocol_bytes_down"]
        else:
            up, down = comm["bytes_up"], comm["bytes_down"]
        per_round.append({"bytes_up": up, "bytes_down": down, "round_s": round_times[i], "aggregate_s": agg_times[i]})
    return {"clients": len(engine.select_clients(0)), "shared_values": sum(v.numel() for v in engine.global_state.values()),
            "shared_bytes": state_nbytes(engine.global_state), "rounds": per_round}


def median(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=4, help="synthetic domains (one client each)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--height", type=int, default=64)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from privreid.data.synthetic import SynthConfig, generate_synthetic

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = generate_synthetic(tmp / "synth", SynthConfig(num_domains=args.domains, ids_per_domain=8,
                                                              test_ids_per_domain=4, images_per_id_per_cam=2,
                                                              height=args.height, width=args.width))
        plain = run_once(root, tmp / "plain", secure=False, args=args)
        secure = run_once(root, tmp / "secure", secure=True, args=args)
    rows = []
    for key, label in (("bytes_up", "bytes up"), ("bytes_down", "bytes down"), ("round_s", "round wall time (s)"),
                       ("aggregate_s", "aggregation wall time (s)")):
        a, b = median(plain["rounds"], key), median(secure["rounds"], key)
        rows.append({"per round": label, "plain": a, "secure": b, "ratio": b / a})
    result = {"clients_per_round": plain["clients"], "shared_values": plain["shared_values"], "rows": rows,
              "plain": plain, "secure": secure, "arch": args.arch, "image": [args.height, args.width]}
    print(f"FedPav, {plain['clients']} clients a round, {args.arch} at {args.height}x{args.width}, "
          f"{plain['shared_values'] / 1e6:.1f} M shared values; median of {args.rounds} rounds")
    print(f"{'per round':28s} {'plain':>14s} {'secure':>14s} {'ratio':>7s}")
    for r in rows:
        print(f"{r['per round']:28s} {r['plain']:14.4g} {r['secure']:14.4g} {r['ratio']:7.2f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    sys.exit(main() and 0)
