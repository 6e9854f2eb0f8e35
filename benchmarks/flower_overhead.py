"""Wall time per round: in-process engine vs Flower, on the same tiny federation, method and seed.

Three runtimes train the same run (fedpav by default, 2 sites of the tiny
synthetic federation, ResNet-18 at 32x16, the last round evaluated):

* ``in-process``: :class:`privreid.federated.engine.FederatedEngine`;
* ``flower-loopback``: the real ServerApp and ClientApp over
  :class:`privreid.flower.loopback.LoopbackGrid` (one process, Flower's own
  message serialisation) -- isolates the cost of the Message API;
* ``flower-deployment``: a SuperLink and one SuperNode per site on
  127.0.0.1 (insecure), the run submitted with ``flwr run``.

Round times come from the moments each round's checkpoint is written (round 1
from the end of site discovery).  Where the extra time goes is attributed
from measurements of the pieces:

* ``serialise``: flwr 1.41 deflate/inflate of every message (loopback, timed);
* ``site engine``: rebuilding the run's engine and model for each message
  (the ClientApp is stateless between messages; timed in the loopback);
* ``runtime``: the deployment's extra over the loopback: one ``flwr-clientapp``
  process per message (Python + torch + privreid imports, FAB install), the
  SuperNode's fixed 3 s polling, HTTP transfers.  ``clientapp start`` is the
  measured time to import the ClientApp in a fresh interpreter.

    python benchmarks/flower_overhead.py                  # ~5 min on a 2-core CPU
    python benchmarks/flower_overhead.py --rounds 2 --skip-deployment
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from privreid.composition import build_run


def round_times(marks: list[float], start: float) -> list[float]:
    """Durations of consecutive rounds from their end times."""
    return [b - a for a, b in zip([start, *marks[:-1]], marks)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="fedpav")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--height", type=int, default=32)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--max-steps", type=int, default=2, help="local batches per round")
    ap.add_argument("--skip-deployment", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(1)

    import privreid.flower.client_app as client_module
    import privreid.flower.loopback as loopback
    from privreid.config import (DataConfig, EvaluationConfig, FederationConfig, ModelConfig, OptimConfig, RunConfig,
                                 RuntimeConfig)
    from privreid.data.catalog import federation_for_config
    from privreid.data.synthetic import SynthConfig, generate_synthetic
    from privreid.federated.engine import FederatedEngine
    from privreid.flower.deployment import LocalDeployment
    from privreid.flower.server_app import RUN_INFO, ServerSettings, run_server

    tmp = Path(tempfile.mkdtemp(prefix="flower-bench-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its run directories hold ResNet-18 checkpoints
    root = generate_synthetic(tmp / "synth", SynthConfig(num_domains=3, ids_per_domain=6, test_ids_per_domain=4,
                                                         cams_per_domain=3, images_per_id_per_cam=2,
                                                         height=args.height, width=args.width))
    cfg = RunConfig(data=DataConfig(roots=[str(root)], height=args.height, width=args.width, test_domains=["synthC"]),
                    model=ModelConfig(arch="resnet18", feat_dim=32),
                    federation=FederationConfig(method=args.method, rounds=args.rounds),
                    optim=OptimConfig(batch_size=8, max_steps_per_epoch=args.max_steps),
                    runtime=RuntimeConfig(device="cpu"),
                    evaluation=EvaluationConfig(every=args.rounds))
    sites = {k: {"data": str(root / f"synth{k}"), "state-dir": str(tmp / f"state-{k}")} for k in "AB"}
    results: dict[str, dict] = {}

    # -- in-process
    marks: list[float] = []
    original_checkpoint = FederatedEngine._checkpoint

    def timed_checkpoint(self, round_no):
        original_checkpoint(self, round_no)
        marks.append(time.perf_counter())

    FederatedEngine._checkpoint = timed_checkpoint
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp / "inproc", progress=False, build=build_run)
    start = time.perf_counter()
    engine.run()
    results["in-process"] = {"rounds_s": round_times(marks, start)}

    # -- loopback: the Message API in one process, with its pieces timed
    marks.clear()
    spent = {"serialise": 0.0, "site engine": 0.0, "site": 0.0}
    wire, site_init = loopback._wire, client_module.SiteEngine.__init__
    deliver = loopback.LoopbackGrid._deliver

    def timed_deliver(self, node, message):  # the ClientApp's work on one message (and its reply's trip)
        t = time.perf_counter()
        try:
            return deliver(self, node, message)
        finally:
            spent["site"] += time.perf_counter() - t

    def timed_wire(message):
        t = time.perf_counter()
        try:
            return wire(message)
        finally:
            spent["serialise"] += time.perf_counter() - t

    def timed_site_init(self, *a, **k):
        t = time.perf_counter()
        try:
            site_init(self, *a, **k)
        finally:
            spent["site engine"] += time.perf_counter() - t

    loopback._wire, client_module.SiteEngine.__init__ = timed_wire, timed_site_init
    loopback.LoopbackGrid._deliver = timed_deliver
    grid = loopback.LoopbackGrid(client_module.app, {i + 1: s for i, s in enumerate(sites.values())})
    discovered: list[float] = []
    run_server(grid, ServerSettings(cfg, tmp / "loopback", poll=0.0),
               log=lambda msg: discovered.append(time.perf_counter()) if " site(s) [" in msg else None)
    loopback._wire, client_module.SiteEngine.__init__, loopback.LoopbackGrid._deliver = wire, site_init, deliver
    results["flower-loopback"] = {"rounds_s": round_times(marks, discovered[0]),
                                  "serialise_s": spent["serialise"], "site_engine_s": spent["site engine"],
                                  "bytes_down": grid.bytes_down, "bytes_up": grid.bytes_up,
                                  "messages": len(grid.received), "site_s": spent["site"]}
    FederatedEngine._checkpoint = original_checkpoint

    # -- real deployment on 127.0.0.1
    if not args.skip_deployment:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import privreid.flower.client_app"], check=True)
        import_s = time.perf_counter() - t
        out = tmp / "deployment"
        ends: list[float] = []

        def watch() -> None:  # the end of each round = a new checkpoint file (one per round)
            ckpt = out / "ckpt.pt"
            if ckpt.exists() and (not ends or ends[-1] != ckpt.stat().st_mtime):
                ends.append(ckpt.stat().st_mtime)

        with LocalDeployment(sites, tmp / "dep") as dep:
            t = time.perf_counter()
            record = dep.run(ServerSettings(cfg, out), poll=0.2, on_poll=watch, timeout=1800)
            total = time.perf_counter() - t
        watch()
        rounds = round_times(ends, (out / RUN_INFO).stat().st_mtime) if len(ends) == args.rounds else []
        results["flower-deployment"] = {
            "rounds_s": rounds, "total_s": total, "clientapp_import_s": import_s,
            "serverapp_s": record["compute-time"]["serverapp-seconds"],
            "clientapp_s": record["compute-time"]["clientapp-seconds"],
            "network_bytes": record["network-traffic"]["total-bytes"]}

    base = statistics.mean(results["in-process"]["rounds_s"])
    print(f"\n{args.method}, {args.rounds} rounds (last one evaluated), 2 sites, ResNet-18 at "
          f"{args.height}x{args.width}, {args.max_steps} local batches of 8; per-round wall time:\n")
    print("| runtime | mean s/round | rounds (s) | x in-process |")
    print("|---|---|---|---|")
    for name, r in results.items():
        if r["rounds_s"]:
            mean = statistics.mean(r["rounds_s"])
            print(f"| {name} | {mean:.2f} | {', '.join(f'{x:.1f}' for x in r['rounds_s'])} | {mean / base:.1f} |")
    lb = results["flower-loopback"]
    n = args.rounds
    print(f"\nloopback extra over in-process: {statistics.mean(lb['rounds_s']) - base:.2f} s/round, of which "
          f"serialisation {lb['serialise_s'] / n:.2f} s/round ({(lb['bytes_down'] + lb['bytes_up']) / n / 2**20:.0f} "
          f"MiB/round both ways), engine rebuilt per message {lb['site_engine_s'] / n:.2f} s/round")
    if "flower-deployment" in results and results["flower-deployment"]["rounds_s"]:
        d = results["flower-deployment"]
        print(f"deployment extra over loopback: {statistics.mean(d['rounds_s']) - statistics.mean(lb['rounds_s']):.2f}"
              f" s/round: a fresh flwr-clientapp process per message (importing the ClientApp alone takes "
              f"{d['clientapp_import_s']:.1f} s), the SuperNode's 3 s polling, HTTP; the {lb['messages']} clientapp "
              f"processes ran {d['clientapp_s']:.0f} s ({d['clientapp_s'] / lb['messages']:.1f} s each, against "
              f"{lb['site_s'] / lb['messages']:.1f} s of ClientApp work per message in the loopback), "
              f"{d['network_bytes'] / 2**20:.0f} MiB on the wire")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
