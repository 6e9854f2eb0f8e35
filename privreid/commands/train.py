"""``privreid train``: one run (federated, centralised or standalone) from its options or a YAML preset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..data.formats import format_help
from .common import DATA_HELP, csv_list, params_with_preset, parse_method_options, run_or_exit


def train_config(p: dict):
    """The :class:`~privreid.config.RunConfig` of ``privreid train``'s parameters (after the preset is applied)."""
    from ..config import DataConfig, ModelConfig, RunConfig, TrainConfig

    return RunConfig(
        data=DataConfig(roots=[str(d) for d in p["data"] or []], format=p["fmt"], protocol=p["protocol"],
                        train_domains=csv_list(p["train_domains"]), test_domains=csv_list(p["test_domains"]),
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
def train_command(
    ctx: typer.Context,
    config_file: Optional[Path] = typer.Option(None, "--config", help="YAML preset of train options (keys are "
                                               "the option names, e.g. `rounds: 300`); flags given on the "
                                               "command line override it. See configs/."),
    method: str = typer.Option("fedpav", help="Training method (see `privreid methods`)."),
    data: Optional[list[str]] = typer.Option(None, "--data", help=DATA_HELP),
    fmt: str = typer.Option("auto", "--format", help=f"Dataset layout for --data roots: {format_help()}. "
                            "See docs/formats.md."),
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
    eval_every: int = typer.Option(0, help="Evaluate every k rounds and after the last; 0 = after the last only."),
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
    from ..provenance import train_preset
    from ..training import train_run

    def go() -> dict:
        p = params_with_preset(ctx, config_file)
        return train_run(train_config(p), p["out"], overwrite=p["overwrite"], resume=p["resume"],
                         progress=not p["quiet"], echo=typer.echo, preset=train_preset(p), logger=p["logger"])

    summary = run_or_exit(go)
    typer.echo(json.dumps(_brief(summary), indent=2))


def _brief(summary: dict) -> dict:
    """``summary.json`` without its per-test-set tables (also inside the ``best`` block), for the terminal."""
    def drop(d: dict) -> dict:
        return {k: drop(v) if isinstance(v, dict) else v for k, v in d.items() if not k.endswith("per_testset")}

    return drop(summary)
