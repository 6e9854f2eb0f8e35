"""The cost of secure aggregation per round: bytes and wall time, with and without, in one run.

FedPav on the synthetic federation, in-process (:class:`privreid.federated.engine.FederatedEngine`),
the same configuration and seed twice: plain, then ``--secure-aggregation``
(SecAgg+ on Flower's primitives, :mod:`privreid.defenses.secure_aggregation.protocol`; default
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

    python benchmarks/secagg.py                           # 4 clients, ResNet-18, 64x32, 2 rounds
    python benchmarks/secagg.py --domains 5 --rounds 3    # more clients a round

Then the same configuration on a loopback Flower deployment (a SuperLink
and one SuperNode per domain on 127.0.0.1, :class:`privreid.flower.deployment.LocalDeployment`),
plain then ``--secure-aggregation`` (``--flower-rounds``, 0 skips it): bytes
are the payload of every message of the round (secure: the four SecAgg+
stages, counted by :func:`privreid.defenses.secure_aggregation.flower.payload_bytes`; plain: the
tensors), wall time the time between consecutive rounds' first records
(rounds 2 on; the first includes start-up).  Run it with ``OMP_NUM_THREADS=1``.

``--out DIR`` keeps the deployment's logs (``DIR/dep/superlink.log``, which
carries the ServerApp's output, and ``DIR/dep/supernode-*.log``, which carry
the ClientApps'); a failed Flower run prints their tails, and the
in-process table is still printed (exit status 1).

Measured here (2-core CPU shared with other agents; one thread; ResNet-18 at
64x32, 512-d neck, one local step of batch 16, 3 clients a round, 11.5 M
shared values; in-process: median of 2 rounds, Flower: of rounds 2-3;
``OMP_NUM_THREADS=1 python benchmarks/secagg.py --domains 3 --round-timeout 60 --flower-timeout 280``):

=================================  ==========  ==========  ======
per round                          plain       secure      ratio
=================================  ==========  ==========  ======
in-process bytes up                137.4 MB    137.4 MB    1.00
in-process bytes down              137.4 MB    137.4 MB    1.00
in-process round wall time         1.39 s      2.90 s      2.09
in-process aggregation wall time   0.16 s      2.20 s      13.7
Flower bytes up                    137.4 MB    274.9 MB    2.00
Flower bytes down                  137.4 MB    137.5 MB    1.00
Flower round wall time             31.0 s      79.8 s      2.57
=================================  ==========  ==========  ======

In-process the bytes barely move: a masked value takes 4 bytes like a
float32, and the protocol's keys and shares add a few KB a round.  The time
goes to the masks: each client expands one private and ``m - 1`` pairwise
seeds into 11.5 M pseudo-random integers (Flower's ``pseudo_rand_gen``,
numpy's Mersenne Twister), and the server one per client to unmask.  On
Flower, ``secaggplus_mod`` ships the masked vector as 64-bit integers (twice
the float32 upload), and a round is four exchanges, each starting a
``flwr-clientapp`` process per SuperNode, instead of one.

Two earlier attempts on the loaded machine failed in flwr's runtime, not in
privreid's protocol code: a SuperNode that never answered the second run's
first message, and all three ClientApps reported "stopped responding"
(``CLIENT_APP_CRASHED``) at round 3's share-keys stage although their logs
show the replies sent; the run then aborts with the one-line message of
:func:`privreid.defenses.secure_aggregation.flower.secure_round`.  ``--round-timeout`` bounds how
long each stage waits.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
from privreid.composition import build_run
import tempfile
import threading
import time
from pathlib import Path

import torch


def config(root: Path, *, secure: bool, rounds: int, args, test_domains=None):
    from privreid.config import (DataConfig, EvaluationConfig, FederationConfig, ModelConfig, OptimConfig,
                                 PrivacyConfig, RunConfig, RuntimeConfig)

    return RunConfig(data=DataConfig(roots=[str(root)], height=args.height, width=args.width,
                                     **({"test_domains": test_domains} if test_domains else {})),
                     model=ModelConfig(arch=args.arch, feat_dim=512),
                     federation=FederationConfig(method="fedpav", rounds=rounds),
                     optim=OptimConfig(batch_size=16, max_steps_per_epoch=1),
                     evaluation=EvaluationConfig(every=10**6),
                     runtime=RuntimeConfig(device="cpu"),
                     privacy=PrivacyConfig(secure_aggregation=secure))


def run_once(root: Path, out: Path, *, secure: bool, args) -> dict:
    """In-process: per round, bytes, the round's wall time and the server's aggregation time (folding included)."""
    from privreid.data.catalog import federation_for_config
    from privreid.federated.engine import FederatedEngine
    from privreid.federated.policy import state_nbytes

    cfg = config(root, secure=secure, rounds=args.rounds, args=args)
    engine = FederatedEngine(cfg, federation_for_config(cfg), out, progress=False, log=lambda s: None, build=build_run)
    engine.evaluates = lambda round_no: False  # cost of training + aggregation only
    agg_times: list[float] = []
    open_inbox = engine.open_inbox

    def timed_inbox(*a):
        inbox = open_inbox(*a)
        agg_times.append(0.0)
        add, result = inbox.accumulator.add, inbox.accumulator.result

        def timed(fn):
            def call(*b):
                t0 = time.perf_counter()
                out = fn(*b)
                agg_times[-1] += time.perf_counter() - t0
                return out
            return call

        inbox.accumulator.add, inbox.accumulator.result = timed(add), timed(result)
        return inbox

    engine.open_inbox = timed_inbox
    starts: list[float] = []
    round_times: list[float] = []
    collect, finish = engine.collect_uploads, engine.finish_round

    def timed_collect(*a):
        starts.append(time.perf_counter())
        return collect(*a)

    def timed_finish(*a):
        finish(*a)
        round_times.append(time.perf_counter() - starts[-1])

    engine.collect_uploads, engine.finish_round = timed_collect, timed_finish
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


def run_flower(dep, root: Path, out: Path, *, secure: bool, sites: int, args) -> dict:
    """On the loopback deployment ``dep``: per round (from the second on), bytes and the wall time between
    consecutive rounds' first records in ``metrics.jsonl`` (read every 0.1 s by a thread of this process; the
    run's status is asked every 3 s: each ask is a ``flwr ls`` process, which polled every 0.1 s would take
    a core from the sites)."""
    from privreid.checkpoint import load_checkpoint
    from privreid.flower.deployment import rounds_done
    from privreid.flower.server_app import ServerSettings

    cfg = config(root, secure=secure, rounds=args.flower_rounds, args=args)
    seen: dict[int, float] = {}
    finished = threading.Event()

    def watch():
        while not finished.wait(0.1):
            try:
                done = rounds_done(out)
            except ValueError:  # a line being written
                continue
            if done and done not in seen:
                seen[done] = time.perf_counter()

    from privreid.flower.messages import FlowerRunError

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        dep.run(ServerSettings(cfg, out, sites=sites, server_eval=False, round_timeout=args.round_timeout),
                timeout=args.flower_timeout, poll=3.0)
    except FlowerRunError:
        print(dep.log_tails(), file=sys.stderr)
        raise
    finally:
        finished.set()
        watcher.join()
    ckpt = load_checkpoint(out / "ckpt.pt")
    secagg = [r for r in ckpt["metrics"] if r.get("scope") == "secagg"]
    per_round = []
    for k in range(2, args.flower_rounds + 1):
        comm = ckpt["comm"][k - 1]
        if secure:
            up, down = secagg[k - 1]["message_bytes_up"], secagg[k - 1]["message_bytes_down"]
        else:
            up, down = comm["bytes_up"], comm["bytes_down"]
        per_round.append({"bytes_up": up, "bytes_down": down,
                          "round_s": seen[k] - seen[k - 1] if k in seen and k - 1 in seen else float("nan")})
    return {"rounds": per_round}


def median(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=4, help="synthetic domains (one client each)")
    parser.add_argument("--rounds", type=int, default=2, help="in-process rounds; 0 = skip the in-process runs")
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--height", type=int, default=64)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--flower-rounds", type=int, default=3,
                        help="rounds on the loopback deployment (the first is not timed: startup); 0 = skip it")
    parser.add_argument("--flower-timeout", type=float, default=900.0,
                        help="seconds each Flower run may take before it is stopped")
    parser.add_argument("--round-timeout", type=float, default=0.0,
                        help="seconds the Flower server waits for the sites' replies to each message (each SecAgg+ "
                             "stage); a site that has not replied by then is dropped; 0 = wait until Flower reports "
                             "it unreachable (privreid flower run's --round-timeout)")
    parser.add_argument("--out", type=Path, help="keep everything here (synthetic data, runs, the deployment's "
                                                 "logs: dep/superlink.log, dep/supernode-*.log; a new folder); default: a temporary one")
    args = parser.parse_args(argv)
    if args.rounds < 0 or args.flower_rounds < 0 or (args.rounds == 0 and args.flower_rounds < 2):
        parser.error("--rounds must be >= 0 and --flower-rounds 0 or >= 2, not both skipped")
    if args.out is not None and args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out}: not empty (give a new folder)")
    torch.set_num_threads(1)
    # a SIGTERM (``timeout``) unwinds like Ctrl-C, so the deployment's processes are stopped, not orphaned
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from privreid.data.synthetic import SynthConfig, generate_synthetic

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            tmp = args.out
        root = generate_synthetic(tmp / "synth", SynthConfig(num_domains=args.domains, ids_per_domain=8,
                                                              test_ids_per_domain=4, images_per_id_per_cam=2,
                                                              height=args.height, width=args.width))
        plain = secure = None
        if args.rounds:
            plain = run_once(root, tmp / "plain", secure=False, args=args)
            secure = run_once(root, tmp / "secure", secure=True, args=args)
        flower, failed = {}, None
        if args.flower_rounds >= 2:
            from privreid.flower.deployment import LocalDeployment
            from privreid.flower.messages import FlowerRunError

            sites = {d.name: {"data": str(d), "state-dir": str(tmp / f"state-{d.name}")}
                     for d in sorted(root.iterdir()) if d.is_dir() and d.name.startswith("synth")}
            try:
                with LocalDeployment(sites, tmp / "dep") as dep:
                    for name, sec in (("plain", False), ("secure", True)):
                        flower[name] = run_flower(dep, root, tmp / f"flower-{name}", secure=sec, sites=len(sites),
                                                  args=args)
                flower["sites"] = len(sites)
            except FlowerRunError as exc:  # the in-process measurements are still printed
                failed, flower = f"{exc}".splitlines()[0], {}
    rows = []
    measured = [("in-process", plain, secure, ("bytes_up", "bytes_down", "round_s", "aggregate_s"))] if plain else []
    if flower:
        measured.append(("Flower loopback deployment", flower["plain"], flower["secure"],
                         ("bytes_up", "bytes_down", "round_s")))
    labels = {"bytes_up": "bytes up", "bytes_down": "bytes down", "round_s": "round wall time (s)",
              "aggregate_s": "aggregation wall time (s)"}
    for runtime, a_run, b_run, keys in measured:
        for key in keys:
            a, b = median(a_run["rounds"], key), median(b_run["rounds"], key)
            rows.append({"runtime": runtime, "per round": labels[key], "plain": a, "secure": b, "ratio": b / a})
    if not plain and not flower:
        raise SystemExit(f"nothing measured: {failed}")
    result = {"clients_per_round": plain["clients"] if plain else flower["sites"], "rows": rows, "plain": plain,
              "secure": secure, "flower": flower, "arch": args.arch, "image": [args.height, args.width],
              "threads": torch.get_num_threads(), "argv": sys.argv[1:] if argv is None else argv}
    print(f"FedPav, {result['clients_per_round']} clients a round, {args.arch} at {args.height}x{args.width}, "
          f"{torch.get_num_threads()} torch thread(s)"
          + (f"; {plain['shared_values'] / 1e6:.1f} M shared values; in-process: median of {args.rounds} rounds"
             if plain else "")
          + (f"; Flower: median of rounds 2..{args.flower_rounds}" if flower else ""))
    print(f"{'runtime':28s} {'per round':28s} {'plain':>14s} {'secure':>14s} {'ratio':>7s}")
    for r in rows:
        print(f"{r['runtime']:28s} {r['per round']:28s} {r['plain']:14.4g} {r['secure']:14.4g} {r['ratio']:7.2f}")
    if failed:
        print(f"Flower loopback deployment: not measured, the run failed: {failed}")
        result["flower_failed"] = failed
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    sys.exit(1 if main().get("flower_failed") else 0)
