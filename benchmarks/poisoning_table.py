"""The poisoning table of docs/poisoning.md: each attack against each server defense, FedPav, clean mAP and ASR.

FedPav on a synthetic federation (:data:`SYNTH`: 3 domains of 36 training
and 20 test identities, written into ``--out`` unless ``--data`` is given)
split by identity into 3 clients per domain (9 clients, all in every round),
the last 2 malicious.  Rows are the attacks (:data:`ATTACKS`: none, label
flip, scaled updates, the backdoors: patch, boosted as model replacement
(``boost`` 4.5 = 9 clients / 2 malicious), blended, constrain-and-scale,
Neurotoxin, distributed; the adaptive attacks on the uploads: ALIE, IPM,
Min-Max, Min-Sum, Fang); columns the server's aggregation (:data:`DEFENSES`:
plain FedPav, Krum, Multi-Krum, median, trimmed mean, Bulyan, geometric
median, centered clipping, FoolsGold, FLTrust, FLAME, norm bounding), secure
aggregation alone and with norm bounding as a verified input bound, plus the
centralised reference: a centralised model trained on the same poisoned data
(the federation's clients after the attack's data poisoning, pooled; an
attack on the upload leaves the data clean).  A cell is the global model's
clean mAP (mean over the seen test sets) and, for a backdoor row, its ASR
(the whole trigger on every query of the target's test set, also on the
gallery without the attacker's own images of the target;
``privreid.evaluation.backdoor``); with ``--eval-every k`` also the ASR of
every k-th round from ``metrics.jsonl``, and for a defense that rejects
clients its detection TPR / FPR over the rounds (``scope: "detection"``).
FLTrust's root update ``g0`` is :func:`root_update`'s.

Every cell starts from the same clean model (a warm start: centralised
training on the clean data, ``--warm-rounds`` x ``--warm-steps`` steps; attacks
on a trained model, as in Bagdasaryan et al.), then trains ``--rounds`` rounds
of ``--steps`` local steps; same seed, data and budget, nothing tuned per cell.
The verified norm bound (250, on every floating entry an upload carries, BatchNorm's running statistics
included) was set from a clean run's update norms: at most 111 in rounds 1-3 of FedPav at 50 local steps
(seed 0), where the boosted backdoor's uploads measured 680-1,210.
Krum assumes ``f = 2`` (the malicious count), Multi-Krum too and averages
the ``m = n - f = 7`` best-scored uploads; Bulyan needs ``n >= 4f + 3``,
so with 9 clients it assumes ``f = 1``; the trimmed mean cuts 25 % per side
(2 of 9); norm bounding and the scaled attack run at their defaults.

    OMP_NUM_THREADS=1 python benchmarks/poisoning_table.py --out runs/poisoning --jobs 2   # 2 CPU cores
    python benchmarks/poisoning_table.py --smoke --data TINY_SYNTH --out DIR                # the test's tiny version

``--rows`` and ``--columns`` pick cells (e.g. one row at a larger budget:
``--rows backdoor --columns "plain FedPav" "centralised, same data" --rounds
10 --steps 50``); ``--jobs N`` trains ``N`` cells at a time, one process and
one torch thread each (with ``--executor ray``: ``N`` Ray Tune trials at a time,
each an ordinary run directory; the centralised reference, which trains on the
poisoned data, stays in this process).  ``--seeds 0,1,2`` runs the whole table
(warm start included) once per seed and reports each cell as mean ± std over the
seeds (``cells.json``: also n and the 95% interval, and every seed's cell).

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

from privreid.experiments.executor import ExecutorSettings, PlannedRun, execute
from privreid.experiments.statistics import describe
from privreid.malicious_clients import adversary_plan
from privreid.malicious_clients.backdoor import recorded_backdoor
from privreid.malicious_clients.detection import detection_totals
from privreid.checkpoint import load_model
from privreid.config import DataConfig, ModelConfig, RunConfig, option_path
from privreid.data.catalog import federation_for_config
from privreid.data.synthetic import SynthConfig, generate_synthetic
from privreid.evaluation.backdoor import CLEAN_GALLERY, evaluate_backdoor
from privreid.evaluation.chance import chance_metrics
from privreid.evaluation.cross_modality import mode_split
from privreid.federated.engine import FederatedEngine
from privreid.composition import build_run

MALICIOUS = 2
BATCH, LR = 8, 0.05
#: the table's data: small enough for its 41 trainings in about 16 minutes on one core
SYNTH = SynthConfig(num_domains=3, ids_per_domain=36, test_ids_per_domain=20, cams_per_domain=4,
                    images_per_id_per_cam=3, height=64, width=32, distractors=10, junk=0)
#: row label -> ``robustness.adversary`` (without ``malicious``)
ATTACKS = {"no attack": None, "label flip": {"name": "label-flip"}, "scaled": {"name": "scaled"},
           "backdoor": {"name": "backdoor", "fraction": 1.0}, "DBA": {"name": "dba", "fraction": 1.0},
           "backdoor, boosted": {"name": "backdoor", "fraction": 1.0, "boost": 4.5},
           "backdoor, blended": {"name": "backdoor", "fraction": 1.0, "trigger": "blend"},
           "constrain-and-scale": {"name": "constrain-scale", "fraction": 1.0},
           "Neurotoxin": {"name": "neurotoxin", "fraction": 1.0},
           "ALIE": {"name": "alie"}, "IPM": {"name": "ipm"}, "Min-Max": {"name": "min-max"},
           "Min-Sum": {"name": "min-sum"}, "Fang": {"name": "fang"}}
#: column label -> the ``train`` fields it sets (server defenses, secure aggregation)
DEFENSES = {"plain FedPav": {}, "Krum (f=2)": {"defenses": {"robust-krum": {"f": 2}}},
            "Multi-Krum (f=2, m=7)": {"defenses": {"robust-krum": {"f": 2, "keep": 7}}},
            "median": {"defenses": {"robust-median": {}}},
            "trimmed mean (0.25)": {"defenses": {"robust-trimmed-mean": {"fraction": 0.25}}},
            "Bulyan (f=1)": {"defenses": {"robust-bulyan": {"f": 1}}},
            "geometric median": {"defenses": {"robust-geomed": {}}},
            "centered clipping": {"defenses": {"centered-clipping": {}}},
            "FoolsGold": {"defenses": {"foolsgold": {}}}, "FLTrust": {"defenses": {"fltrust": {}}},
            "FLAME": {"defenses": {"flame": {}}},
            "norm bounding": {"defenses": {"norm-bound": {"bound": 1.0}}},
            "secure aggregation": {"secure_aggregation": True},
            "secure aggregation + verified norm bound (250)": {"secure_aggregation": True,
                                                               "defenses": {"norm-bound": {"bound": 250.0}}}}
CENTRAL = "centralised, same data"
#: ``--smoke``: the rows and columns it runs (every kind of cell: clean, a data attack on two clients, a robust rule,
#: secure aggregation, the centralised reference)
SMOKE_ATTACKS, SMOKE_DEFENSES = ("no attack", "DBA"), ("plain FedPav", "Krum (f=2)", "secure aggregation")


def run_config(args, attack: dict | None, defense: dict, method: str = "fedpav") -> RunConfig:
    """One cell's run: the table's data, model and budget with ``attack`` and ``defense`` (the fields a column sets,
    by name), from the warm start."""
    train = dict(method=method, rounds=args.rounds, batch_size=BATCH, max_steps_per_epoch=args.steps,
                 lr_backbone=LR, device="cpu", seed=args.seed, every=args.eval_every, **defense)
    if "fltrust" in defense.get("defenses", {}):  # the seed's root update (root_update)
        train["defenses"] = {**defense["defenses"], "fltrust": {"root": args.fltrust_root}}
    if attack and method != "centralized":
        train["adversary"] = {**attack, "malicious": MALICIOUS}
    return RunConfig(data=DataConfig(roots=list(args.data), protocol="by-identity", num_clients=3, height=32,
                                     width=16),
                     model=ModelConfig(arch="resnet18", feat_dim=128, weights=args.warm_start)
                     ).with_values({option_path(name): value for name, value in train.items()})


def warm_start(args, out: Path) -> str:
    """The clean model every cell starts from: centralised on the clean data (``--warm-rounds`` epochs of at most
    ``--warm-steps`` steps), saved as a full-model state dict without classifier (heads are per client)."""
    config = run_config(args, None, {}, method="centralized")
    config.federation.rounds, config.optim.max_steps_per_epoch, config.evaluation.every = args.warm_rounds, args.warm_steps, 0
    train(config, out / "warm")
    state = {k: v for k, v in load_model(out / "warm" / "ckpt.pt").state_dict().items()
             if not k.startswith("classifier")}
    torch.save(state, out / "warm.pt")
    return str(out / "warm.pt")


def root_update(args, out: Path) -> str:
    """FLTrust's root update ``g0`` (Cao et al. 2021: the server's own update on a small clean root data set):
    ``--steps`` steps of centralised training on the clean pooled data from the warm start, minus the warm start,
    on every floating entry the clients upload; the same ``g0`` every round (the defense's stated deviation)."""
    config = run_config(args, None, {}, method="centralized")
    config.federation.rounds, config.evaluation.every = 1, 0
    train(config, out / "root")
    warm = torch.load(args.warm_start, weights_only=True)
    trained = load_model(out / "root" / "ckpt.pt").state_dict()
    torch.save({k: trained[k].double() - v.double() for k, v in warm.items() if torch.is_floating_point(v)},
               out / "fltrust_root.pt")
    return str(out / "fltrust_root.pt")


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
    finite (if any); with ``backdoor``, the ASR on the target's test set (also on the gallery without the
    attacker's own images of the target) and the ASR of every evaluated round (``metrics.jsonl``); with a
    defense that rejects clients, its detection TPR / FPR over the run."""
    cell = {"mAP": summary["global_seen"]["mAP"]}
    broken = sorted(name for name, m in summary["global_seen_per_testset"].items() if m.get("non_finite_features"))
    if broken:  # scored at chance level (privreid.evaluation.model_eval)
        cell["non_finite"] = broken
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if backdoor is not None:
        [testset] = [t for t in federation_for_config(config).seen if t.name == backdoor.target_domain]
        measured = evaluate_backdoor(load_model(out / "ckpt.pt"), testset, backdoor, height=config.data.height,
                                     width=config.data.width)
        cell["asr"] = measured["asr"]
        if measured.get("asr" + CLEAN_GALLERY) is not None:
            cell["asr" + CLEAN_GALLERY] = measured["asr" + CLEAN_GALLERY]
        rounds = {rec["round"]: rec["asr"] for rec in metrics if rec.get("scope") == "backdoor" and "asr" in rec}
        if rounds:
            cell["asr_per_round"] = [rounds[r] for r in sorted(rounds)]
    for name, totals in detection_totals(metrics).items():
        cell["detection"] = {"defense": name, "tpr": totals["tpr"], "fpr": totals["fpr"]}
    return cell


def cell_name(attack_label: str, column: str) -> str:
    return f"{attack_label}-{column}".replace(" ", "_").replace(",", "")


def run_cell(args, work: Path, attack_label: str, column: str) -> dict:
    """The cell of row ``attack_label`` and column ``column`` (a defense, or :data:`CENTRAL`), trained in
    ``work``."""
    attack = ATTACKS[attack_label]
    backdoor = recorded_backdoor(run_config(args, attack, {})) if attack else None
    out = work / cell_name(attack_label, column)
    if column != CENTRAL:
        config = run_config(args, attack, DEFENSES[column])
        return measure(train(config, out), out, backdoor, config)
    central = run_config(args, attack, {}, method="centralized")
    data = poisoned_federation(run_config(args, attack, {})) if attack else None
    return measure(train(central, out, data), out, backdoor, central)


def run_cells(args, work: Path, jobs: list[tuple[str, str]]):
    """Every cell of ``jobs`` (attack, column) for ``args.seed``, as each finishes: ``(attack, column, cell)``.

    ``--executor ray``: the defenses' cells are Ray Tune trials (:func:`privreid.experiments.executor.execute`,
    ``--jobs`` at a time), each written as ``privreid train`` writes a run; a failed one is ``{"failed": error}``.
    """
    if args.executor == "ray":
        planned = [PlannedRun(cell_name(a, c), run_config(args, ATTACKS[a], DEFENSES[c]), {"attack": a, "column": c},
                              args.seed) for a, c in jobs if c != CENTRAL]
        settings = ExecutorSettings("ray", max_concurrent=args.jobs, retries=args.retries)
        for outcome in execute(planned, work, settings):
            a, c = outcome.run.cell["attack"], outcome.run.cell["column"]
            backdoor = recorded_backdoor(outcome.run.config) if ATTACKS[a] else None
            yield a, c, ({"failed": outcome.error} if outcome.status != "done" else
                         measure(outcome.summary, work / outcome.run.name, backdoor, outcome.run.config))
        jobs = [(a, c) for a, c in jobs if c == CENTRAL]
    with contextlib.ExitStack() as stack:
        mapped = map
        if args.jobs > 1 and args.executor == "local":  # spawned processes (no forked torch state), one thread each
            mapped = stack.enter_context(concurrent.futures.ProcessPoolExecutor(
                args.jobs, mp_context=multiprocessing.get_context("spawn"), initializer=torch.set_num_threads,
                initargs=(1,))).map
        calls = [(args, work, attack, column) for attack, column in jobs]
        for (_, _, attack, column), cell in zip(calls, mapped(run_cell, *zip(*calls)) if calls else ()):
            yield attack, column, cell


def over_seeds(cells: list[dict]) -> dict:
    """A cell over seeds: the one seed's cell as it is; several: mAP (and ASR) mean, std, n and 95% interval
    (:func:`privreid.experiments.statistics.describe`), the failed seeds and every seed's cell."""
    if len(cells) == 1:
        return cells[0]
    done = [c for c in cells if "failed" not in c]
    out = {"n": len(done), "failed": len(cells) - len(done)}
    for metric in ("mAP", "asr", "asr" + CLEAN_GALLERY):
        stats = describe([c[metric] for c in done if metric in c], metric)
        if stats[f"{metric}_n"]:
            out |= {metric: stats.pop(f"{metric}_mean")} | stats
    for rate in ("tpr", "fpr"):
        values = [c["detection"][rate] for c in done if c.get("detection", {}).get(rate) is not None]
        if values:
            out.setdefault("detection", {"defense": next(c["detection"]["defense"] for c in done if "detection" in c)})
            out["detection"] |= {rate: float(np.mean(values)), f"{rate}_std": float(np.std(values, ddof=1))
                                 if len(values) > 1 else 0.0}
    curves = [c["asr_per_round"] for c in done if "asr_per_round" in c]
    if curves and len({len(curve) for curve in curves}) == 1:
        out["asr_per_round"] = np.mean(curves, axis=0).tolist()
    if any("non_finite" in c for c in done):
        out["non_finite"] = sorted({name for c in done for name in c.get("non_finite", [])})
    return out | {"seeds": cells}


def chance_map(config: RunConfig) -> float:
    """The mAP of a uniformly random ranking (:func:`~privreid.evaluation.chance.chance_metrics`), mean over the seen
    test sets as a cell's: what a model that learned nothing scores."""
    maps = []
    for testset in federation_for_config(config).seen:
        (q_pids, q_cams), (g_pids, g_cams) = ((np.array([pid for _, pid, _ in side]), np.array([c for _, _, c in side]))
                                              for side in mode_split(testset))
        maps.append(chance_metrics(q_pids, g_pids, q_cams, g_cams)["mAP"])
    return float(np.mean(maps))


def markdown(cells: dict) -> str:
    """Rows: attacks; columns: defenses and the centralised reference.

    The first table's cell is ``mAP / ASR`` in % (ASR '—' for the attacks without a trigger; in brackets the ASR
    on the gallery without the attacker's own images of the target), ``mAP†`` where the model's features were not
    finite on a test set (scored there at chance level); over several seeds each number is ``mean ± std``, with
    the seeds that failed counted.  A second table gives the detection TPR / FPR of the defenses that reject
    clients (over the run's rounds), a third a backdoor row's ASR per evaluated round (mean over seeds)."""
    def number(c: dict, metric: str, decimals: int) -> str:
        text = f"{100 * c[metric]:.{decimals}f}"
        return text + (f" ± {100 * c[f'{metric}_std']:.{decimals}f}" if f"{metric}_std" in c else "")

    def cell(c: dict) -> str:
        if "mAP" not in c:
            return "failed"
        asr = number(c, "asr", 0) if "asr" in c else "—"
        if "asr" + CLEAN_GALLERY in c:
            asr += f" [{number(c, 'asr' + CLEAN_GALLERY, 0)}]"
        return f"{number(c, 'mAP', 1)}{'†' * ('non_finite' in c)} / {asr}" + (
            f" ({c['failed']} failed)" if c.get("failed") else "")

    def grid(title: str, show, keep) -> list[str]:
        columns = [col for col in next(iter(cells.values())) if any(keep(row[col]) for row in cells.values())]
        rows = [attack for attack, row in cells.items() if any(keep(row[col]) for col in columns)]
        if not columns or not rows:
            return []
        return ["", title, "", "| attack | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|",
                *(f"| {a} | " + " | ".join(show(cells[a][col]) if keep(cells[a][col]) else "" for col in columns)
                  + " |" for a in rows)]

    def detection(c: dict) -> str:
        d = c["detection"]
        return " / ".join("—" if d.get(rate) is None else f"{100 * d[rate]:.0f}" for rate in ("tpr", "fpr"))

    lines = grid("clean mAP / ASR [ASR without the attacker's images of the target], %", cell, lambda c: True)[3:]
    lines += grid("Detection: TPR / FPR over the rounds, % (defenses that reject clients)", detection,
                  lambda c: "detection" in c)
    lines += grid("ASR per evaluated round, %", lambda c: " ".join(f"{100 * a:.0f}" for a in c["asr_per_round"]),
                  lambda c: "asr_per_round" in c)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data", nargs="*", default=None, help="data roots (default: SYNTH, generated into --out)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="local steps per round (max_steps_per_epoch)")
    ap.add_argument("--warm-rounds", type=int, default=6, help="epochs of the centralised warm start")
    ap.add_argument("--warm-steps", type=int, default=100, help="steps per epoch of the warm start")
    ap.add_argument("--eval-every", type=int, default=0, help="evaluate every k-th round too (a backdoor row's ASR "
                    "per round; default 0: after the last round only)")
    ap.add_argument("--jobs", type=int, default=1, help="cells trained at the same time, one process and one torch "
                    "thread each (default 1)")
    ap.add_argument("--rows", nargs="+", choices=list(ATTACKS), help="only these attacks (default: all)")
    ap.add_argument("--columns", nargs="+", choices=[*DEFENSES, CENTRAL], help="only these columns (default: all)")
    ap.add_argument("--smoke", action="store_true", help="1 round of 1 step (warm start too), 2 rows and 3 "
                    "columns: checks the table runs")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds: the table once per seed, each cell "
                    "mean ± std over them (default 0)")
    ap.add_argument("--executor", choices=("local", "ray"), default="local", help="local: this machine, --jobs "
                    "processes; ray: Ray Tune trials, --jobs at a time (RAY_ADDRESS joins a cluster)")
    ap.add_argument("--retries", type=int, default=1, help="ray: tries again a failed cell this many times")
    args = ap.parse_args(argv)
    try:
        seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds takes comma-separated integers, e.g. 0,1,2 (got {args.seeds!r})")
    if args.smoke:
        args.rounds = args.steps = args.warm_rounds = args.warm_steps = 1
    args.out.mkdir(parents=True, exist_ok=True)
    if args.data is None:
        args.data = [str(generate_synthetic(args.out / "synth", SYNTH, overwrite=True))]
    args.seed, args.warm_start, args.fltrust_root = seeds[0], None, None  # the warm start starts from scratch
    chance = f"Chance level (a uniformly random ranking): mAP {100 * chance_map(run_config(args, None, {})):.1f} %."
    if len(seeds) > 1:
        chance = f"Each cell: mean ± std over seeds {args.seeds}. {chance}"
    print(chance, flush=True)
    attacks = args.rows or (SMOKE_ATTACKS if args.smoke else list(ATTACKS))
    columns = args.columns or [*(SMOKE_DEFENSES if args.smoke else DEFENSES), CENTRAL]
    started = time.time()
    by_seed: dict[str, dict[str, list]] = {attack: {column: [] for column in columns} for attack in attacks}
    for seed in seeds:
        args.seed, args.warm_start = seed, None
        work = args.out / "runs" / (f"seed{seed}" if len(seeds) > 1 else "")
        args.warm_start = warm_start(args, work)
        args.fltrust_root = root_update(args, work) if "FLTrust" in columns else None
        for attack, column, cell in run_cells(args, work, [(a, c) for a in attacks for c in columns]):
            by_seed[attack][column].append(cell)
            print(f"{attack:10s} {column:24s} seed {seed} {cell} ({time.time() - started:.0f} s)", flush=True)
    shutil.rmtree(args.out / "runs", ignore_errors=True)
    cells = {attack: {column: over_seeds(row[column]) for column in columns} for attack, row in by_seed.items()}
    table = markdown(cells)
    (args.out / "table.md").write_text(f"{table}\n\n{chance}\n")
    (args.out / "cells.json").write_text(json.dumps(cells, indent=2) + "\n")
    print(f"\n{table}\n\n{chance}\n{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
