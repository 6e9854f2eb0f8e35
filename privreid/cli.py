"""The ``privreid`` command line (typer).

Every command prints a one-line error and exits with status 2 on bad input
(:class:`privreid.errors.PrivreidError`); nothing is written before the input
has been validated.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup

from . import __version__
from .commands.common import csv_list as _csv
from .commands.common import params_with_preset, parse_method_options
from .commands.common import fail as _fail
from .commands.common import run_dir_or_exit
from .commands.common import run_or_exit as _run
from .errors import ConfigError, MissingDependencyError


class _Group(TyperGroup):
    """Every command: a missing optional package (privreid.dependencies) is one ``error:`` line and exit 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MissingDependencyError as exc:
            _fail(str(exc))


app = typer.Typer(
    cls=_Group,
    name="privreid",
    help="Privacy-preserving (federated) person re-identification: train (with DP defences), evaluate, "
         "attack, invert, corrupt, compare and sweep; Flower for multi-machine runs.\n\n"
         "Example: privreid train --method fedpav --rounds 10 --out runs/fedpav",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Synthetic data and dataset statistics.", no_args_is_help=True)
app.add_typer(data_app, name="data")

DATA_HELP = ("Dataset: 'synth' (default, the embedded synthetic federation), 'synth-vi' / 'synth-vi-video' "
             "(the embedded synthetic visible-infrared entities, as images / tracklets), a `privreid data synth` "
             "directory, a dataset root (Market-1501, DukeMTMC-reID, CUHK03-NP, MSMT17; visible-infrared: "
             "SYSU-MM01, RegDB, LLCM, HITSZ-VCM, BUPTCampus; see docs/vi-datasets.md), or a folder of "
             "dataset roots. Repeat for several datasets.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"privreid {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """privreid command line."""


def train_config(p: dict):
    """The :class:`~privreid.config.RunConfig` of ``privreid train``'s parameters (after the preset is applied)."""
    from .config import DataConfig, ModelConfig, RunConfig, TrainConfig

    return RunConfig(
        data=DataConfig(roots=[str(d) for d in p["data"] or []], format=p["fmt"], protocol=p["protocol"],
                        train_domains=_csv(p["train_domains"]), test_domains=_csv(p["test_domains"]),
                        num_clients=p["num_clients"], height=p["height"], width=p["width"],
                        audit_holdout=p.get("audit_holdout") or 0.0),
        model=ModelConfig(arch=p["arch"], neck=p["neck"], feat_dim=p["feat_dim"], last_stride=p["last_stride"],
                          pretrained=None if p["pretrained"] in (None, "none") else p["pretrained"],
                          weights=str(p["weights"]) if p["weights"] else None, dropout=p["dropout"]),
        train=TrainConfig(method=p["method"], rounds=p["rounds"], optimizer=p["optimizer"],
                          local_epochs=p["local_epochs"], batch_size=p["batch_size"],
                          lr_backbone=p["lr_backbone"], lr_head=p["lr_head"], lr_neck=p["lr_neck"],
                          lr_step=p["lr_step"], lr_gamma=p["lr_gamma"], client_fraction=p["client_fraction"],
                          triplet_weight=p["triplet_weight"], random_erasing=p["random_erasing"],
                          label_smoothing=p["label_smoothing"], eval_flip=p["eval_flip"],
                          report_best=p["report_best"],
                          beta=p["beta"], beta_mode=p["beta_mode"], max_steps_per_epoch=p["max_steps"],
                          dp_sgd=p["dp_sgd"], client_dp=p["client_dp"], noise_multiplier=p["noise_multiplier"],
                          max_grad_norm=p["max_grad_norm"], clip=p["clip"], target_epsilon=p["target_epsilon"],
                          delta=p["delta"], secure_aggregation=p.get("secure_aggregation", False),
                          secagg_shares=p.get("secagg_shares"), secagg_threshold=p.get("secagg_threshold"),
                          secagg_clip=p.get("secagg_clip", 8.0), secagg_quantization=p.get("secagg_quantization", 2**22),
                          secagg_max_weight=p.get("secagg_max_weight"),
                          eval_every=p["eval_every"], seed=p["seed"], device=p["device"],
                          num_workers=p["workers"],
                          method_options={**parse_method_options(p["opt"]),
                                          **{k: False for k in ("an", "lsn", "dual") if p[f"no_{k}"]}}),
    )


# --------------------------------------------------------------------------- train
@app.command()
def train(
    ctx: typer.Context,
    config_file: Optional[Path] = typer.Option(None, "--config", help="YAML preset of train options (keys are "
                                               "the option names, e.g. `rounds: 300`); flags given on the "
                                               "command line override it. See configs/."),
    method: str = typer.Option("fedpav", help="Training method (see `privreid methods`)."),
    data: Optional[list[str]] = typer.Option(None, "--data", help=DATA_HELP),
    fmt: str = typer.Option("auto", "--format", help="Dataset layout for --data roots: auto, market1501, "
                            "dukemtmcreid, cuhk03np-detected, cuhk03np-labeled, msmt17; visible-infrared: "
                            "sysu-mm01, sysu-mm01-indoor, regdb (trial 1) or regdb-<n>, llcm, vi-folders "
                            "(`privreid data synth --vi`); video: hitsz-vcm, buptcampus, vi-folders "
                            "(`privreid data synth --video`). See docs/vi-datasets.md."),
    protocol: str = typer.Option("by-dataset", help="Partition: by-dataset, by-camera or by-identity; the "
                                 "L2RW+ privacy protocols ci (camera independence: one client per camera), "
                                 "ei (entity independence: one client per dataset) or es (entity sharing: "
                                 "the datasets pooled into one client); ei and es need a held-out "
                                 "--test-domains entity."),
    train_domains: Optional[str] = typer.Option(None, help="Comma-separated training domains (default: all "
                                                "but --test-domains; synth holds out its last domain)."),
    test_domains: Optional[str] = typer.Option(None, help="Comma-separated held-out (unseen) domains."),
    num_clients: Optional[int] = typer.Option(None, help="Clients per domain for --protocol by-identity."),
    rounds: int = typer.Option(10, help="Communication rounds (epochs for centralized/standalone)."),
    local_epochs: int = typer.Option(1, help="Local epochs E per round."),
    batch_size: int = typer.Option(32, help="Batch size B."),
    optimizer: str = typer.Option("sgd", help="sgd (FedPav: momentum 0.9, wd 5e-4) or adam."),
    lr_backbone: float = typer.Option(0.005, help="Backbone learning rate (FedPav: 0.005)."),
    lr_head: float = typer.Option(0.05, help="Classifier learning rate (FedPav: 0.05)."),
    lr_neck: Optional[float] = typer.Option(None, help="Neck (embedding bottleneck) learning rate (default: "
                                            "--lr-backbone; FedPav's and L2RW+'s reference code train it at "
                                            "the classifier's rate)."),
    lr_step: int = typer.Option(40, help="Decay the learning rates by --lr-gamma every N rounds."),
    lr_gamma: float = typer.Option(0.1, help="Learning-rate decay factor."),
    client_fraction: Optional[float] = typer.Option(None, help="Fraction C of clients sampled per round "
                                                    "(default: the method's; 1.0, FedReID 0.5)."),
    triplet_weight: Optional[float] = typer.Option(None, help="Weight of the batch-hard triplet loss (0 = off; "
                                                   "on switches to PK sampling). Default: the method's (FedARKS 1, "
                                                   "its Eq. 2; others 0)."),
    label_smoothing: float = typer.Option(0.1, help="Label smoothing of the identity cross-entropy (0 = plain "
                                          "cross-entropy, as in all five papers and their code)."),
    random_erasing: float = typer.Option(0.5, help="Random-erasing probability (data augmentation)."),
    dropout: float = typer.Option(0.0, help="Dropout on the feature before the identity classifier, training "
                                  "only (FedPav's reference code: 0.5)."),
    max_steps: Optional[int] = typer.Option(None, help="Cap on batches per local epoch (quick runs)."),
    eval_every: int = typer.Option(1, help="Evaluate every k rounds (and always after the last)."),
    eval_flip: bool = typer.Option(False, "--eval-flip", help="Evaluate with the mean feature of each image and "
                                   "its mirror (FedPav's reference code does)."),
    report_best: int = typer.Option(1, help="summary.json's `best` block: 1 = the last evaluation; K > 1 = the "
                                    "mean of the K global evaluations with the highest mean seen rank-1 (FedPav "
                                    "reports K = 3, evaluated every 10 rounds)."),
    opt: Optional[list[str]] = typer.Option(None, "--opt", help="Method option key=value (repeatable), "
                                            "e.g. --opt mu=0.01; `privreid methods` lists each method's options."),
    no_an: bool = typer.Option(False, "--no-an", help="SKA ablation (Table 4): plain BN instead of attentive norm."),
    no_lsn: bool = typer.Option(False, "--no-lsn", help="SKA ablation: share the norm layers (no LSN)."),
    no_dual: bool = typer.Option(False, "--no-dual", help="SKA ablation: no dual local-generalised model."),
    beta: float = typer.Option(0.0, help="FedReID white-noise scale beta (Eq. 14/15), for any method; 0 = off. "
                               "No formal privacy guarantee."),
    beta_mode: str = typer.Option("upload", help="Where beta noise is added: upload (Eq. 14), download "
                                  "(Eq. 15) or both."),
    dp_sgd: bool = typer.Option(False, "--dp-sgd", help="Record-level DP-SGD (Opacus) on every client: Poisson "
                                "batches, per-sample clipping, Gaussian noise, RDP accounting; BatchNorm "
                                "becomes GroupNorm."),
    client_dp: bool = typer.Option(False, "--client-dp", help="Client-level DP (DP-FedAvg): clip each client "
                                   "update to --clip, Gaussian noise on the uniform mean."),
    noise_multiplier: Optional[float] = typer.Option(None, help="DP noise std / clipping bound (z)."),
    max_grad_norm: Optional[float] = typer.Option(None, help="DP-SGD per-sample clipping bound C (default 1.0)."),
    clip: Optional[float] = typer.Option(None, help="Client-level DP: L2 bound S of a client update."),
    target_epsilon: Optional[float] = typer.Option(None, help="DP budget: training stops before epsilon would "
                                                   "exceed it; with --dp-sgd and no --noise-multiplier the "
                                                   "noise is derived from it for the planned rounds."),
    delta: Optional[float] = typer.Option(None, help="DP delta (default 1e-5; must be below 1/N)."),
    secure_aggregation: bool = typer.Option(False, "--secure-aggregation", help="The server learns only the sum "
                                            "of each round's uploads (SecAgg+ on Flower's primitives); methods "
                                            "whose server reads each upload are refused (`privreid methods`). "
                                            "With --client-dp: distributed DP."),
    secagg_shares: Optional[int] = typer.Option(None, help="Secure aggregation: shares of each client's secrets "
                                                "(default: all clients of the round)."),
    secagg_threshold: Optional[int] = typer.Option(None, help="Secure aggregation: shares that reconstruct a "
                                                   "secret (default: a majority of the shares)."),
    secagg_clip: float = typer.Option(8.0, help="Secure aggregation: clipping range of the pre-scaled update "
                                      "values (Flower's 8); values beyond it are counted as saturated."),
    secagg_quantization: int = typer.Option(2**22, help="Secure aggregation: quantisation range (Flower's 2**22)."),
    secagg_max_weight: Optional[float] = typer.Option(None, help="Secure aggregation: public bound of a client's "
                                                      "weight (default: the largest of the round)."),
    arch: str = typer.Option("resnet18", help="Backbone: resnet18, resnet34, resnet50."),
    neck: str = typer.Option("linear", help="Neck: linear (Linear+BN embedding) or bnneck."),
    feat_dim: int = typer.Option(512, help="Embedding size of the linear neck."),
    last_stride: int = typer.Option(1, help="Stride of the last ResNet stage (1 or 2)."),
    pretrained: Optional[str] = typer.Option(None, help="'imagenet' for torchvision weights (needs internet); "
                                             "'none' overrides a preset."),
    weights: Optional[Path] = typer.Option(None, help="Initial weights from a local state-dict file."),
    height: int = typer.Option(128, help="Input height."),
    width: int = typer.Option(64, help="Input width."),
    audit_holdout: float = typer.Option(0.0, help="Keep this seeded fraction of each client's training images "
                                        "out of training, recorded in the checkpoint (image-level membership "
                                        "audits: `privreid audit`)."),
    seed: int = typer.Option(0, help="Random seed (runs are deterministic for a seed)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    workers: int = typer.Option(0, help="Data-loading worker processes."),
    out: Path = typer.Option(Path("runs/latest"), help="Output directory (ckpt.pt, metrics.jsonl, summary.json)."),
    overwrite: bool = typer.Option(False, help="Replace a run already in --out."),
    resume: bool = typer.Option(False, help="Continue the run in --out from its checkpoint."),
    quiet: bool = typer.Option(False, help="No progress bars."),
    logger: str = typer.Option("none", help="Also mirror every metric record to tensorboard (OUT/tensorboard; "
                               "pip install 'privreid[tensorboard]') or wandb ('privreid[wandb]'); none."),
) -> None:
    """Train a model (federated, centralised or standalone).

    Example: privreid train --method centralized --rounds 5 --out runs/central
    """
    from .provenance import train_preset
    from .training import train_run

    def go() -> dict:
        p = params_with_preset(ctx, config_file)
        return train_run(train_config(p), p["out"], overwrite=p["overwrite"], resume=p["resume"],
                         progress=not p["quiet"], echo=typer.echo, preset=train_preset(p), logger=p["logger"])

    summary = _run(go)
    typer.echo(json.dumps(_brief(summary), indent=2))


def _brief(summary: dict) -> dict:
    """``summary.json`` without its per-test-set tables (also inside the ``best`` block), for the terminal."""
    def drop(d: dict) -> dict:
        return {k: drop(v) if isinstance(v, dict) else v for k, v in d.items() if not k.endswith("per_testset")}

    return drop(summary)


# --------------------------------------------------------------------------- eval
@app.command("eval")
def eval_cmd(
    model: Path = typer.Option(..., "--model", help="Checkpoint (ckpt.pt) to evaluate."),
    data: Optional[list[str]] = typer.Option(None, "--data", help=DATA_HELP + " Default: the checkpoint's data."),
    domains: Optional[str] = typer.Option(None, help="Comma-separated domains to test on (default: all)."),
    client: Optional[str] = typer.Option(None, help="Evaluate this client's personalised model."),
    flip: bool = typer.Option(False, help="Average features of the image and its mirror."),
    metric: str = typer.Option("euclidean", help="euclidean or cosine."),
    single_gallery_shot: bool = typer.Option(False, help="CUHK03 protocol: one gallery image per identity, "
                                             "averaged over 10 repeats."),
    mode: Optional[str] = typer.Option(None, "--mode", help="Visible-infrared data only: ir-to-visible "
                                       "(default; infrared queries, visible gallery, as L2RW+ reports) or "
                                       "visible-to-ir."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Video data only: frames T per tracklet "
                                          "whose features are averaged (L2RW+ Eq. 9); default: the dataset's "
                                          "(6 for HITSZ-VCM and vi-folders, 10 for BUPTCampus)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the results as JSON."),
    fmt: str = typer.Option("auto", "--format", help="Layout of the --data roots (auto-detected by default). "
                            "The small DG benchmarks (viper, grid, prid, ilids, 3dpes, caviar, cuhk01, cuhk02, "
                            "cuhksysu, ilidsvid; grid-crosscam / caviar-crosscam for FedPav's Table 5) are "
                            "ranked under their own protocol, mean (std) over --num-splits seeded splits "
                            "written next to --json; see docs/datasets.md."),
    splits: Optional[Path] = typer.Option(None, "--splits", help="Small DG benchmarks: reuse the splits of "
                                          "this file (written by an earlier --json run)."),
    num_splits: int = typer.Option(10, "--num-splits", help="Small DG benchmarks: random splits (Song et al.: 10)."),
    corruption: Optional[str] = typer.Option(None, "--corruption", help="Evaluate under corruptions with "
                                             "CIL-ReID's protocol: 'all', a family (noise, blur, weather, "
                                             "digital) or comma-separated names (`privreid corrupt` previews "
                                             "them). Without it: clean evaluation."),
    severity: str = typer.Option("random", "--severity", help="With --corruption: 1-5, or 'random' "
                                 "(drawn per image)."),
    corrupt: str = typer.Option("both", "--corrupt", help="With --corruption: corrupt the query, the "
                                "gallery or both."),
    repeats: int = typer.Option(10, "--repeats", help="With --corruption: evaluations with fresh draws; "
                                "the table shows their mean (std)."),
    seed: int = typer.Option(0, "--seed", help="With --corruption: seed of the draws; small DG benchmarks: "
                             "seed of the splits."),
    pixel_scale: str = typer.Option("1", "--pixel-scale", help="With --corruption: 1 (CIL-ReID) takes "
                                    "ImageNet-C's pixel lengths literally at the stored image size; 'auto' (or a "
                                    "factor) scales them, a variant labelled 'scaled' and listed as a deviation."),
) -> None:
    """Evaluate a checkpoint on the query/gallery split of each dataset, optionally under corruptions.

    With --corruption, every corrupted image gets a random type (and severity) at its stored size, before
    resizing, and the evaluation is repeated (CIL-ReID's protocol); the table gives clean R1 / mAP / mINP and
    the corrupted mean (std) over the repeats.

    Visible-infrared and video datasets are ranked cross-modality under their benchmark's protocol
    (docs/vi-datasets.md), in --mode; a tracklet's feature is the mean of --seq-len frame features.

    Example: privreid eval --model runs/fedpav/ckpt.pt --data synth
    Example: privreid eval --model runs/dppt/ckpt.pt --data synth-vi --mode visible-to-ir
    Example: privreid eval --model runs/fedpav/ckpt.pt --corruption all --severity random --repeats 10
    """
    from .checkpoint import load_checkpoint, load_model
    from .commands.corrupt import parse_pixel_scale
    from .config import RunConfig
    from .corruptions import resolve_corruptions
    from .data.catalog import resolve_datasets
    from .data.partition import as_test_set
    from .evaluation.corrupted_eval import CORRUPT_SIDES, evaluate_corrupted, is_scaled
    from .evaluation.cross_modality import IR_TO_VISIBLE, MODES
    from .evaluation.model_eval import evaluate_model
    from .federated.engine import resolve_device
    from .reporting import format_table

    def corruption_options() -> dict:
        if severity != "random" and not (severity.isdigit() and 1 <= int(severity) <= 5):
            raise ConfigError(f"--severity must be an integer from 1 to 5 or 'random', got {severity!r}")
        if corrupt not in CORRUPT_SIDES:
            raise ConfigError(f"--corrupt must be one of {', '.join(CORRUPT_SIDES)}, got {corrupt!r}")
        if repeats < 1:
            raise ConfigError(f"--repeats must be at least 1, got {repeats}")
        if seed < 0:
            raise ConfigError(f"--seed must be non-negative, got {seed}")
        return dict(corruptions=resolve_corruptions(_csv(corruption) or []),
                    severity=severity if severity == "random" else int(severity), corrupt=corrupt,
                    repeats=repeats, seed=seed, pixel_scale=parse_pixel_scale(pixel_scale))

    def check_vi_options(testsets: list) -> None:
        """Refuse VI / video options on data they do not apply to, and vice versa (before any evaluation)."""
        if mode is not None and mode not in MODES:
            raise ConfigError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
        if seq_len is not None and seq_len < 1:
            raise ConfigError(f"--seq-len must be at least 1, got {seq_len}")
        if corruption is not None and (mode is not None or seq_len is not None):
            raise ConfigError("--mode and --seq-len do not combine with --corruption (it ranks each dataset's "
                              "query/gallery split as given: infrared-to-visible for VI data)")
        for ts in testsets:
            if mode is not None and ts.modality is None:
                raise ConfigError(f"--mode applies to visible-infrared data only; {ts.name} has no modality map")
            if seq_len is not None and ts.tracklets is None:
                raise ConfigError(f"--seq-len applies to video data only; {ts.name} holds images")
            if corruption is not None and ts.tracklets is not None:
                raise ConfigError(f"--corruption corrupts images; {ts.name} holds video tracklets")
            if single_gallery_shot and (ts.modality is not None or ts.tracklets is not None):
                raise ConfigError(f"--single-gallery-shot is the CUHK03 protocol; {ts.name} is visible-infrared "
                                  "or video data, ranked by its own benchmark protocol")

    def go() -> list[dict]:
        if is_dg_eval_format(fmt):
            return dg_rows()
        corrupted = corruption_options() if corruption is not None else None
        check_vi_options([])
        ckpt = load_checkpoint(model)
        cfg = RunConfig.from_dict(ckpt["config"])
        dev = resolve_device(device)
        net = load_model(ckpt, client=client, device=dev)
        datasets = resolve_datasets(data or cfg.data.roots, cfg.data.format if not data else fmt)
        wanted = _csv(domains) or list(datasets)
        unknown = [d for d in wanted if d not in datasets]
        if unknown:
            raise ConfigError(f"unknown domain(s) {', '.join(unknown)}; available: {', '.join(datasets)}")
        testsets = [as_test_set(name, datasets[name]) for name in wanted]
        check_vi_options(testsets)
        rows = []
        for testset in testsets:
            common = dict(height=cfg.data.height, width=cfg.data.width, device=dev, flip=flip, metric=metric,
                          single_gallery_shot=single_gallery_shot, progress=True)
            if corrupted is not None:
                rows.append({"testset": testset.name, **evaluate_corrupted(net, testset, **common, **corrupted)})
                continue
            row = {"testset": testset.name, **evaluate_model(net, testset, mode=mode or IR_TO_VISIBLE,
                                                             seq_len=seq_len, **common)}
            rows.append({**row, "mode": mode or IR_TO_VISIBLE} if testset.modality is not None else row)
        return rows

    def dg_rows() -> list[dict]:
        """Each --data root ranked under its small-benchmark protocol (privreid.evaluation.dg_protocol)."""
        if not data:
            raise ConfigError(f"--format {fmt} needs --data ROOT (the dataset's root folder)")
        if corruption is not None or mode is not None or seq_len is not None or single_gallery_shot:
            raise ConfigError(f"--format {fmt} is ranked under its own protocol; --corruption, --mode, --seq-len "
                              "and --single-gallery-shot do not apply")
        if num_splits < 1 or seed < 0:
            raise ConfigError("--num-splits must be at least 1 and --seed non-negative")
        ckpt = load_checkpoint(model)
        cfg = RunConfig.from_dict(ckpt["config"])
        dev = resolve_device(device)
        net = load_model(ckpt, client=client, device=dev)
        rows = []
        for root in data:
            name = Path(root).name
            written = json_out.with_name(f"{json_out.stem}-{name}-splits.json") if json_out else None
            result = evaluate_dg_model(net, root, fmt, height=cfg.data.height, width=cfg.data.width, device=dev,
                                       flip=flip, metric=metric, num_splits=num_splits, seed=seed,
                                       splits_file=splits, write_splits_to=written)
            rows.append({"testset": f"{name} ({result['protocol']})", **result})
        return rows

    from .evaluation.dg_protocol import evaluate_dg_model, is_dg_eval_format
    from .rundir import check_output_file

    _run(check_output_file, json_out, "--json")
    rows = _run(go)
    if rows and "protocol" in rows[0]:
        typer.echo(format_table([{"testset": r["testset"], **{key: f"{100 * r[k]:.1f}" + (
            f" ({100 * r['std'][k]:.1f})" if "std" in r else "") for k, key in
            (("rank1", "R1"), ("rank5", "R5"), ("rank10", "R10"), ("mAP", "mAP"), ("mINP", "mINP"))}}
            for r in rows]))
        typer.echo(f"mean (std) over {rows[0]['splits']} split(s), seed {rows[0]['seed']}" if "std" in rows[0]
                   else "mean over the queries, each ranked against its own gallery")
    elif corruption is None:
        typer.echo(format_table([{"testset": r["testset"] + (f" ({r['mode']})" if "mode" in r else ""),
                                  "R1": r["rank1"], "R5": r["rank5"], "R10": r["rank10"], "mAP": r["mAP"],
                                  "mINP": r["mINP"]} for r in rows]))
    else:
        def mean_std(r: dict, key: str) -> str:
            return f"{100 * r['mean'][key]:.1f} ({100 * r['std'][key]:.1f})"

        typer.echo(format_table([{"testset": r["testset"], "clean R1": r["clean"]["rank1"],
                                  "clean mAP": r["clean"]["mAP"], "clean mINP": r["clean"]["mINP"],
                                  "R1": mean_std(r, "rank1"), "mAP": mean_std(r, "mAP"),
                                  "mINP": mean_std(r, "mINP")} for r in rows]))
        deviations = rows[0]["deviations"] if rows else []
        protocol = "CIL-ReID protocol" + (", scaled" if rows and is_scaled(rows[0]["pixel_scale"]) else "")
        typer.echo(f"corrupted {corrupt} ({protocol}): {', '.join(rows[0]['corruptions']) if rows else '-'}; "
                   f"severity {severity}; pixel scale {pixel_scale}; mean (std) over {repeats} repeat(s), seed {seed}")
        for line in deviations:
            typer.echo(f"deviation: {line}")
    if json_out:
        json_out.write_text(json.dumps(rows, indent=2))


# --------------------------------------------------------------------------- compare
@app.command()
def compare(
    models: Optional[list[Path]] = typer.Argument(None, help="Checkpoints to compare (same data)."),
    models_opt: Optional[list[Path]] = typer.Option(None, "--models", help="Checkpoints (alternative to the "
                                                    "positional list; --models a.pt b.pt)."),
    untrained: bool = typer.Option(True, help="Add a randomly initialised model of the same architecture."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    markdown: Optional[Path] = typer.Option(None, help="Also write the clean table to this Markdown file."),
    suite: Optional[str] = typer.Option(None, help="Run a report suite: comma list of clean, attacks, "
                                        "corruptions, inversion, audit (membership inference) or 'all'; needs --out."),
    out: Optional[Path] = typer.Option(None, help="Report directory (report.md, CSVs, drops.png, inversion/)."),
    testsets: str = typer.Option("all", help="Suite test sets: all, seen or unseen."),
    attacks: str = typer.Option("all", help="Suite attacks: fgsm, pgd, bim, mifgsm, tifgsm, all or a comma list."),
    eps: str = typer.Option("8/255", help="Suite attack budget in [0, 1] pixels (a number or a fraction)."),
    steps: int = typer.Option(10, help="Suite attack iterations."),
    max_queries: Optional[int] = typer.Option(None, help="Suite: attack at most N queries per test set."),
    corruptions: str = typer.Option("noise,blur,weather,digital,all", help="Suite corruption units: families, "
                                    "names, or 'all' (the full CIL-ReID mix)."),
    repeats: int = typer.Option(10, help="Suite corruption repeats (CIL-ReID: 10; other counts are listed "
                                "as a deviation)."),
    pixel_scale: str = typer.Option("1", "--pixel-scale", help="Suite corruptions: 1 (CIL-ReID: literal pixel "
                                    "lengths) or 'auto' / a factor (the scaled variant, titled 'scaled')."),
    subjects: int = typer.Option(2, help="Suite inversion subjects."),
    iterations: int = typer.Option(200, help="Suite inversion iterations."),
    threat: str = typer.Option("full", help="Suite inversion threat model: full, shared or shared-feature."),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Compare checkpoints on the same seen and unseen test sets (R1 / mAP / mINP); optionally a full report.

    The test sets are those of the first checkpoint's run configuration.  With
    --suite, also adversarial queries (Table IX layout), corruptions and
    gradient inversion, written to --out as report.md, CSVs and PNGs.

    Example: privreid compare --models runs/central/ckpt.pt runs/fedpav/ckpt.pt --suite all --out runs/report
    """
    from .comparison import compare_checkpoints
    from .reporting import format_table

    from .rundir import check_output_file

    paths = list(models_opt or []) + list(models or [])
    if not paths:
        _fail("give at least one checkpoint")
    _run(check_output_file, markdown, "--markdown")
    if suite is None:
        rows = _run(compare_checkpoints, paths, untrained=untrained, device=device)
        table = format_table(rows)
        typer.echo(table)
        if markdown:
            markdown.write_text(table + "\n")
        return

    from .attacks.retrieval import resolve_methods
    from .commands.attack import parse_fraction
    from .commands.corrupt import parse_pixel_scale
    from .reporting.suite import SUITES, SuiteSettings, run_suite

    def go():
        if out is None:
            raise ConfigError("--suite needs --out")
        names = list(SUITES) if suite.strip() == "all" else _csv(suite) or []
        settings = SuiteSettings(suites=names, testsets=testsets, attacks=resolve_methods(attacks),
                                 eps=parse_fraction(eps, "--eps"), steps=steps, max_queries=max_queries,
                                 corruptions=_csv(corruptions) or [], corruption_repeats=repeats,
                                 pixel_scale=parse_pixel_scale(pixel_scale),
                                 inversion_subjects=subjects, inversion_iterations=iterations,
                                 inversion_threat=threat)
        return run_suite(paths, out, settings, device=device, progress=not quiet)

    with run_dir_or_exit(out, "compare"):
        result = _run(go)
        if result["clean"]:
            typer.echo(format_table(result["clean"]))
            if markdown:
                markdown.write_text(format_table(result["clean"]) + "\n")
        typer.echo(f"wrote {out / 'report.md'}")


# --------------------------------------------------------------------------- methods
@app.command()
def methods() -> None:
    """List the registered training methods.

    Example: privreid methods
    """
    from .federated.registry import available_methods, get_method, secure_aggregation_support

    for name in available_methods():
        method = get_method(name)
        typer.echo(f"{name:14s} {method.summary}")
        typer.echo(" " * 15 + f"secure aggregation: {secure_aggregation_support(method)}")
        if method.options:
            typer.echo(" " * 15 + "options: " + ", ".join(f"{k}={v}" for k, v in method.options.items()))


# --------------------------------------------------------------------------- data
@data_app.command("synth")
def data_synth(
    out: Path = typer.Option(..., help="Directory to write (must not exist or be empty)."),
    seed: int = typer.Option(0, help="Generator seed (output is deterministic for a seed)."),
    domains: Optional[int] = typer.Option(None, help="Number of domains (default: the demo's)."),
    height: Optional[int] = typer.Option(None, help="Image height (default 128; 64 with --vi / --video)."),
    width: Optional[int] = typer.Option(None, help="Image width (default 64; 32 with --vi / --video)."),
    vi: bool = typer.Option(False, "--vi", help="Visible-infrared entities (visible, infrared and dual cameras; "
                            "vi-folders layout) instead of RGB domains."),
    video: bool = typer.Option(False, "--video", help="Visible-infrared tracklets (one folder of frames of one "
                               "walk cycle per tracklet); implies --vi."),
    overwrite: bool = typer.Option(False, help="Replace an existing directory."),
) -> None:
    """Write the synthetic multi-domain ReID dataset (Market-1501 layout per domain, or visible-infrared).

    Example: privreid data synth --out data/synth   (or: privreid data synth --vi --out data/synth-vi)
    """
    import dataclasses

    from .data.synthetic import SynthConfig, generate_synthetic
    from .data.synthetic_vi import SynthVIConfig, generate_synthetic_vi

    count = "num_entities" if vi or video else "num_domains"
    changes = {k: v for k, v in {"seed": seed, count: domains, "height": height, "width": width}.items()
               if v is not None}
    if vi or video:
        config, generate = dataclasses.replace(SynthVIConfig(video=video), **changes), generate_synthetic_vi
    else:
        config, generate = dataclasses.replace(SynthConfig(), **changes), generate_synthetic
    from .rundir import check_output_dir

    _run(check_output_dir, out)
    path = _run(generate, out, config, progress=True, overwrite=overwrite)
    typer.echo(f"wrote {path}")


@data_app.command("info")
def data_info(
    root: Path = typer.Argument(..., help="A dataset root, a `data synth` directory, or a folder of datasets."),
    fmt: str = typer.Option("auto", "--format", help="Dataset layout (auto-detected by default)."),
) -> None:
    """Print per-split statistics (identities / images / cameras), like Table 1 of the papers.

    Example: privreid data info ~/datasets/Market-1501
    """
    from .data import format_stats_table
    from .data.catalog import resolve_datasets, verify_datasets

    datasets = _run(resolve_datasets, [str(root)], fmt)
    _run(verify_datasets, datasets)
    for name, ds in datasets.items():
        typer.echo(f"== {name} ({ds.root})")
        typer.echo(format_stats_table(ds))


# --------------------------------------------------------------------------- commands defined in privreid/commands/
# (one line per command; keep this block sorted)
from .commands.attack import attack_command  # noqa: E402
app.command("attack")(attack_command)
from .commands.audit import audit_command  # noqa: E402
app.command("audit")(audit_command)
from .commands.corrupt import corrupt_command  # noqa: E402
app.command("corrupt")(corrupt_command)
from .commands.export import export_command  # noqa: E402
app.command("export")(export_command)
from .commands.flower import flower_app  # noqa: E402
app.add_typer(flower_app, name="flower")
from .commands.invert import invert_command  # noqa: E402
app.command("invert")(invert_command)
from .commands.reproduce import reproduce_command  # noqa: E402
app.command("reproduce")(reproduce_command)
from .commands.sweep import sweep_command  # noqa: E402
app.command("sweep", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(sweep_command)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
