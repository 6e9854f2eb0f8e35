"""The poisoning table of docs/poisoning.md: each attack against each server defense, FedPav, clean mAP and ASR.

FedPav on a synthetic federation (:data:`SYNTH`: 3 domains of 36 training
and 20 test identities, written into ``--out`` unless ``--data`` is given)
split by identity into 3 clients per domain (9 clients, all in every round),
the last 2 malicious.  Rows are the attacks (none, label flip, scaled updates,
backdoor, distributed backdoor, and the backdoor boosted as model replacement:
``boost`` 4.5 = 9 clients / 2 malicious); columns the server's aggregation
(plain FedPav, Krum, Multi-Krum, coordinate-wise median, trimmed mean, Bulyan,
norm bounding) and secure aggregation, plus the centralised reference: a centralised model
trained on the same poisoned data (the federation's clients after the
attack's data poisoning, pooled; an attack on the upload, scaled updates,
leaves the data clean).  A cell is the global model's clean mAP (mean over
the seen test sets) and, for a backdoor row, its ASR (the whole trigger on
every query of the target's test set; ``privreid.evaluation.backdoor``).

Every cell starts from the same clean model (a warm start: centralised
training on the clean data, ``--warm-rounds`` x ``--warm-steps`` steps; attacks
on a trained model, as in Bagdasaryan et al.), then trains ``--rounds`` rounds
of ``--steps`` local steps; same seed, data and budget, nothing tuned per cell.
Krum assumes ``f = 2`` (the malicious count), Multi-Krum too and averages
the ``m = n - f = 7`` best-scored uploads; Bulyan needs ``n >= 4f + 3``,
so with 9 clients it assumes ``f = 1``; the trimmed mean cuts 25 % per side
(2 of 9); norm bounding and the scaled attack run at their defaults.

    OMP_NUM_THREADS=1 python benchmarks/poisoning_table.py --out runs/poisoning --jobs 2   # 2 CPU cores
    python benchmarks/poisoning_table.py --smoke --data TINY_SYNTH --out DIR                # the test's tiny version

``--rows`` and ``--columns`` pick cells (e.g. one row at a larger budget:
``--rows backdoor --columns "plain FedPav" "centralised, same data" --rounds
10 --steps 50``); ``--jobs N`` trains ``N`` cells at a time, one process and
one torch thread each.

Images are rendered at 64x32 and trained on at 32x16.

It writes ``table.md`` (the Markdown table and the chance-level mAP) and ``cells.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import multiprocessing
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from privreid.malicious_clients import adversary_plan
from privreid.malicious_clients.backdoor import recorded_backdoor
from privreid.checkpoint import load_model
from privreid.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from privreid.data.catalog import federation_for_config
from privreid.data.synthetic import SynthConfig, generate_synthetic
from privreid.evaluation.backdoor import evaluate_backdoor
from privreid.evaluation.chance import chance_metrics
from privreid.evaluation.model_eval import evaluation_split
from privreid.federated.engine import FederatedEngine
from privreid.composition import build_run

MALICIOUS = 2
BATCH, LR = 8, 0.05
#: the table's data: small enough for its 41 trainings in about 16 minutes on one core
SYNTH = SynthConfig(num_domains=3, ids_per_domain=36, test_ids_per_domain=20, cams_per_domain=4,
                    images_per_id_per_cam=3, height=64, width=32, distractors=10, junk=0)
#: row label -> ``train.adversary`` (without ``malicious``)
ATTACKS = {"no attack": None, "label flip": {"name": "label-flip"}, "scaled": {"name": "scaled"},
           "backdoor": {"name": "backdoor", "fraction": 1.0}, "DBA": {"name": "dba", "fraction": 1.0},
           "backdoor, boosted": {"name": "backdoor", "fraction": 1.0, "boost": 4.5}}
#: column label -> ``train.defenses`` / secure aggregation
DEFENSES = {"plain FedPav": {}, "Krum (f=2)": {"robust-krum": {"f": 2}},
            "Multi-Krum (f=2, m=7)": {"robust-krum": {"f": 2, "keep": 7}}, "median": {"robust-median": {}},
            "trimmed mean (0.25)": {"robust-trimmed-mean": {"fraction": 0.25}},
            "Bulyan (f=1)": {"robust-bulyan": {"f": 1}}, "norm bounding": {"norm-bound": {"bound": 1.0}},
            "secure aggregation": "secure-aggregation"}
CENTRAL = "centralised, same data"
#: ``--smoke``: the rows and columns it runs (every kind of cell: clean, a data attack on two clients, a robust rule,
#: secure aggregation, the centralised reference)
SMOKE_ATTACKS, SMOKE_DEFENSES = ("no attack", "DBA"), ("plain FedPav", "Krum (f=2)", "secure aggregation")


def run_config(args, attack: dict | None, defense, method: str = "fedpav") -> RunConfig:
    """One cell's run: the table's data, model and budget with ``attack`` and ``defense``, from the warm start."""
    train = dict(method=method, rounds=args.rounds, batch_size=BATCH, max_steps_per_epoch=args.steps,
                 lr_backbone=LR, device="cpu", seed=0)
    if defense == "secure-aggregation":
        train["secure_aggregation"] = True
    elif defense:
        train["defenses"] = defense
    if attack and method != "centralized":
        train["adversary"] = {**attack, "malicious": MALICIOUS}
    return RunConfig(data=DataConfig(roots=list(args.data), protocol="by-identity", num_clients=3, height=32,
                                     width=16),
                     model=ModelConfig(arch="resnet18", feat_dim=128, weights=args.warm_start),
                     train=TrainConfig(**train))


def warm_start(args, out: Path) -> str:
    """The clean model every cell starts from: centralised on the clean data (``--warm-rounds`` epochs of at most
    ``--warm-steps`` steps), saved as a full-model state dict without classifier (heads are per client)."""
    config = run_config(args, None, {}, method="centralized")
    config.train.rounds, config.train.max_steps_per_epoch = args.warm_rounds, args.warm_steps
    train(config, out / "warm")
    state = {k: v for k, v in load_model(out / "warm" / "ckpt.pt").state_dict().items()
             if not k.startswith("classifier")}
    torch.save(state, out / "warm.pt")
    return str(out / "warm.pt")


def train(config: RunConfig, out: Path, federation=None) -> dict:
    """Train ``config`` (on ``federation``, default the config's) into ``out``; its summary."""
    shutil.rmtree(out, ignore_errors=True)
    engine = FederatedEngine(config, federation or federation_for_config(config), out, progress=False,
                             log=lambda line: None, build=build_run)
    return engine.run()


def poisoned_federation(config: RunConfig):
    """The federation of ``config`` after its attack's data poisoning (the centralised reference pools it)."""
    federation = federation_for_config(config)
    plan = adversary_plan(config)
    return dataclasses.replace(federation, clients=plan.poisoned(None, federation.clients))


def measure(summary: dict, out: Path, backdoor, config: RunConfig) -> dict:
    """A cell: clean mAP (mean over the seen test sets), the test sets on which the model's features were not
    finite (if any), and, with ``backdoor``, the ASR on the target's test set."""
    cell = {"mAP": summary["global_seen"]["mAP"]}
    broken = sorted(name for name, m in summary["global_seen_per_testset"].items() if m.get("non_finite_features"))
    if broken:  # scored at chance level (privreid.evaluation.model_eval)
        cell["non_finite"] = broken
    if backdoor is not None:
        [testset] = [t for t in federation_for_config(config).seen if t.name == backdoor.target_domain]
        measured = evaluate_backdoor(load_model(out / "ckpt.pt"), testset, backdoor, height=config.data.height,
                                     width=config.data.width)
        cell["asr"] = measured["asr"]
    return cell


def run_cell(args, work: Path, attack_label: str, column: str) -> dict:
    """The cell of row ``attack_label`` and column ``column`` (a defense, or :data:`CENTRAL`), trained in
    ``work``."""
    attack = ATTACKS[attack_label]
    backdoor = recorded_backdoor(run_config(args, attack, {})) if attack else None
    out = work / f"{attack_label}-{column}".replace(" ", "_").replace(",", "")
    if column != CENTRAL:
        config = run_config(args, attack, DEFENSES[column])
        return measure(train(config, out), out, backdoor, config)
    central = run_config(args, attack, {}, method="centralized")
    data = poisoned_federation(run_config(args, attack, {})) if attack else None
    return measure(train(central, out, data), out, backdoor, central)


def chance_map(config: RunConfig) -> float:
    """The mAP of a uniformly random ranking (:func:`~privreid.evaluation.chance.chance_metrics`), mean over the seen
    test sets as a cell's: what a model that learned nothing scores."""
    maps = []
    for testset in federation_for_config(config).seen:
        (q_pids, q_cams), (g_pids, g_cams) = ((np.array([pid for _, pid, _ in side]), np.array([c for _, _, c in side]))
                                              for side in evaluation_split(testset))
        maps.append(chance_metrics(q_pids, g_pids, q_cams, g_cams)["mAP"])
    return float(np.mean(maps))


def markdown(cells: dict) -> str:
    """Rows: attacks; columns: defenses and the centralised reference; a cell ``mAP / ASR`` in % (ASR '—' for the
    attacks without a trigger), ``mAP†`` where the model's features were not finite on a test set (scored there
    at chance level)."""
    columns = list(next(iter(cells.values())))
    lines = ["| attack | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for attack, row in cells.items():
        lines.append(f"| {attack} | " + " | ".join(f"{100 * c['mAP']:.1f}{'†' * ('non_finite' in c)} / "
                                                    + (f"{100 * c['asr']:.0f}" if "asr" in c else "—")
                                                    for c in row.values()) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data", nargs="*", default=None, help="data roots (default: SYNTH, generated into --out)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="local steps per round (max_steps_per_epoch)")
    ap.add_argument("--warm-rounds", type=int, default=6, help="epochs of the centralised warm start")
    ap.add_argument("--warm-steps", type=int, default=100, help="steps per epoch of the warm start")
    ap.add_argument("--jobs", type=int, default=1, help="cells trained at the same time, one process and one torch "
                    "thread each (default 1)")
    ap.add_argument("--rows", nargs="+", choices=list(ATTACKS), help="only these attacks (default: all)")
    ap.add_argument("--columns", nargs="+", choices=[*DEFENSES, CENTRAL], help="only these columns (default: all)")
    ap.add_argument("--smoke", action="store_true", help="1 round of 1 step (warm start too), 2 rows and 3 "
                    "columns: checks the table runs")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rounds = args.steps = args.warm_rounds = args.warm_steps = 1
    args.out.mkdir(parents=True, exist_ok=True)
    if args.data is None:
        args.data = [str(generate_synthetic(args.out / "synth", SYNTH, overwrite=True))]
    args.warm_start = None  # the warm start itself starts from scratch
    chance = f"Chance level (a uniformly random ranking): mAP {100 * chance_map(run_config(args, None, {})):.1f} %."
    print(chance, flush=True)
    work = args.out / "runs"
    args.warm_start = warm_start(args, work)
    attacks = args.rows or (SMOKE_ATTACKS if args.smoke else list(ATTACKS))
    columns = args.columns or [*(SMOKE_DEFENSES if args.smoke else DEFENSES), CENTRAL]
    jobs = [(args, work, attack, column) for attack in attacks for column in columns]
    started = time.time()
    cells: dict[str, dict[str, dict]] = {attack: {} for attack in attacks}
    with contextlib.ExitStack() as stack:
        mapped = map
        if args.jobs > 1:  # spawned processes (no forked torch state), one thread each
            mapped = stack.enter_context(concurrent.futures.ProcessPoolExecutor(
                args.jobs, mp_context=multiprocessing.get_context("spawn"), initializer=torch.set_num_threads,
                initargs=(1,))).map
        for (_, _, attack, column), cell in zip(jobs, mapped(run_cell, *zip(*jobs))):
            cells[attack][column] = cell
            print(f"{attack:10s} {column:24s} {cell} ({time.time() - started:.0f} s)", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    table = markdown(cells)
    (args.out / "table.md").write_text(f"{table}\n\n{chance}\n")
    (args.out / "cells.json").write_text(json.dumps(cells, indent=2) + "\n")
    print(f"\n{table}\n\n{chance}\n{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
