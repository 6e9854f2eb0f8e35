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

from . import __version__
from .commands.common import csv_list as _csv
from .commands.common import run_or_exit as _run
from .errors import ConfigError

app = typer.Typer(
    name="privreid",
    help="Privacy-preserving (federated) person re-identification: train, evaluate, compare.\n\n"
         "Example: privreid train --method fedpav --rounds 10 --out runs/fedpav",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Synthetic data and dataset statistics.", no_args_is_help=True)
app.add_typer(data_app, name="data")

DATA_HELP = ("Dataset: 'synth' (default, the embedded synthetic federation), a `privreid data synth` "
             "directory, a dataset root (Market-1501, DukeMTMC-reID, CUHK03-NP, MSMT17), or a folder of "
             "dataset roots. Repeat for several datasets.")


def _options(pairs: Optional[list[str]]) -> dict:
    """``["mu=0.01", "public=/data/x"]`` -> ``{"mu": 0.01, "public": "/data/x"}`` (JSON values where they parse)."""
    out = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--opt expects key=value, got {pair!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def _with_preset(ctx: typer.Context, preset: Optional[Path]) -> dict:
    """The command's parameters, with values from a YAML preset where no flag was given.

    Preset keys are option names (``lr-backbone`` or ``lr_backbone``);
    ``format`` maps to the ``--format`` option.
    """
    import yaml

    params = dict(ctx.params)
    if preset is None:
        return params
    if not preset.is_file():
        raise ConfigError(f"preset not found: {preset}")
    try:
        values = yaml.safe_load(preset.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{preset} is not valid YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"{preset} must hold a mapping of option names to values")
    for key, value in values.items():
        name = {"format": "fmt"}.get(str(key), str(key).replace("-", "_"))
        if name not in params or name == "config_file":
            raise ConfigError(f"{preset}: unknown option {key!r}")
        source = ctx.get_parameter_source(name)
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):  # not given on the command line
            if name in ("data", "opt") and isinstance(value, str):
                value = [value]
            if name == "opt" and isinstance(value, dict):
                value = [f"{k}={json.dumps(v)}" for k, v in value.items()]
            params[name] = value
    return params


def _version(value: bool) -> None:
    if value:
        typer.echo(f"privreid {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """privreid command line."""


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
                            "dukemtmcreid, cuhk03np-detected, cuhk03np-labeled or msmt17."),
    protocol: str = typer.Option("by-dataset", help="Partition: by-dataset, by-camera or by-identity."),
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
    lr_step: int = typer.Option(40, help="Decay the learning rates by --lr-gamma every N rounds."),
    lr_gamma: float = typer.Option(0.1, help="Learning-rate decay factor."),
    client_fraction: Optional[float] = typer.Option(None, help="Fraction C of clients sampled per round "
                                                    "(default: the method's; 1.0, FedReID 0.5)."),
    triplet_weight: float = typer.Option(0.0, help="Weight of the batch-hard triplet loss (0 = off; "
                                         "on switches to PK sampling)."),
    random_erasing: float = typer.Option(0.5, help="Random-erasing probability (data augmentation)."),
    max_steps: Optional[int] = typer.Option(None, help="Cap on batches per local epoch (quick runs)."),
    eval_every: int = typer.Option(1, help="Evaluate every k rounds (and always after the last)."),
    opt: Optional[list[str]] = typer.Option(None, "--opt", help="Method option key=value (repeatable), "
                                            "e.g. --opt mu=0.01; `privreid methods` lists each method's options."),
    no_an: bool = typer.Option(False, "--no-an", help="SKA ablation (Table 4): plain BN instead of attentive norm."),
    no_lsn: bool = typer.Option(False, "--no-lsn", help="SKA ablation: share the norm layers (no LSN)."),
    no_dual: bool = typer.Option(False, "--no-dual", help="SKA ablation: no dual local-generalised model."),
    beta: float = typer.Option(0.0, help="FedReID white-noise scale beta (Eq. 14/15), for any method; 0 = off. "
                               "No formal privacy guarantee."),
    beta_mode: str = typer.Option("upload", help="Where beta noise is added: upload (Eq. 14), download "
                                  "(Eq. 15) or both."),
    arch: str = typer.Option("resnet18", help="Backbone: resnet18, resnet34, resnet50."),
    neck: str = typer.Option("linear", help="Neck: linear (Linear+BN embedding) or bnneck."),
    feat_dim: int = typer.Option(512, help="Embedding size of the linear neck."),
    last_stride: int = typer.Option(1, help="Stride of the last ResNet stage (1 or 2)."),
    pretrained: Optional[str] = typer.Option(None, help="'imagenet' for torchvision weights (needs internet); "
                                             "'none' overrides a preset."),
    weights: Optional[Path] = typer.Option(None, help="Initial weights from a local state-dict file."),
    height: int = typer.Option(128, help="Input height."),
    width: int = typer.Option(64, help="Input width."),
    seed: int = typer.Option(0, help="Random seed (runs are deterministic for a seed)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    workers: int = typer.Option(0, help="Data-loading worker processes."),
    out: Path = typer.Option(Path("runs/latest"), help="Output directory (ckpt.pt, metrics.jsonl, summary.json)."),
    overwrite: bool = typer.Option(False, help="Replace a run already in --out."),
    resume: bool = typer.Option(False, help="Continue the run in --out from its checkpoint."),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Train a model (federated, centralised or standalone).

    Example: privreid train --method centralized --rounds 5 --out runs/central
    """
    from .config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from .data.catalog import federation_for_config
    from .federated.engine import FederatedEngine, prepare_out_dir
    from .federated.registry import get_method

    def go() -> dict:
        p = _with_preset(ctx, config_file)
        if p["overwrite"] and p["resume"]:
            raise ConfigError("--overwrite and --resume exclude each other")
        out = Path(p["out"])
        config = RunConfig(
            data=DataConfig(roots=[str(d) for d in p["data"] or []], format=p["fmt"], protocol=p["protocol"],
                            train_domains=_csv(p["train_domains"]), test_domains=_csv(p["test_domains"]),
                            num_clients=p["num_clients"], height=p["height"], width=p["width"]),
            model=ModelConfig(arch=p["arch"], neck=p["neck"], feat_dim=p["feat_dim"], last_stride=p["last_stride"],
                              pretrained=None if p["pretrained"] in (None, "none") else p["pretrained"], weights=str(p["weights"]) if p["weights"] else None),
            train=TrainConfig(method=p["method"], rounds=p["rounds"], optimizer=p["optimizer"],
                              local_epochs=p["local_epochs"], batch_size=p["batch_size"],
                              lr_backbone=p["lr_backbone"], lr_head=p["lr_head"], lr_step=p["lr_step"],
                              lr_gamma=p["lr_gamma"], client_fraction=p["client_fraction"],
                              triplet_weight=p["triplet_weight"], random_erasing=p["random_erasing"],
                              beta=p["beta"], beta_mode=p["beta_mode"], max_steps_per_epoch=p["max_steps"],
                              eval_every=p["eval_every"], seed=p["seed"], device=p["device"],
                              num_workers=p["workers"],
                              method_options={**_options(p["opt"]),
                                              **{k: False for k in ("an", "lsn", "dual") if p[f"no_{k}"]}}),
        )
        config.validate()
        get_method(config.train.method)
        federation = federation_for_config(config, verify=True)
        engine = FederatedEngine(config, federation, out, progress=not p["quiet"])
        prepare_out_dir(out, overwrite=p["overwrite"], resume=p["resume"])
        typer.echo(f"{config.train.method}: {len(engine.clients)} client(s) "
                   f"[{', '.join(c.name for c in engine.clients)}], "
                   f"unseen: {', '.join(t.name for t in federation.unseen) or '-'}; writing {out}")
        return engine.run(resume=p["resume"])

    summary = _run(go)
    typer.echo(json.dumps({k: v for k, v in summary.items() if not k.endswith("per_testset")}, indent=2))


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
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the results as JSON."),
) -> None:
    """Evaluate a checkpoint on the query/gallery split of each dataset.

    Example: privreid eval --model runs/fedpav/ckpt.pt --data synth
    """
    from .checkpoint import load_checkpoint, load_model
    from .config import RunConfig
    from .data.catalog import resolve_datasets
    from .data.types import TestSet
    from .evaluation.model_eval import evaluate_model
    from .federated.engine import resolve_device
    from .reporting import format_table

    def go() -> list[dict]:
        ckpt = load_checkpoint(model)
        cfg = RunConfig.from_dict(ckpt["config"])
        dev = resolve_device(device)
        net = load_model(ckpt, client=client, device=dev)
        datasets = resolve_datasets(data or cfg.data.roots, cfg.data.format if not data else "auto")
        wanted = _csv(domains) or list(datasets)
        unknown = [d for d in wanted if d not in datasets]
        if unknown:
            raise ConfigError(f"unknown domain(s) {', '.join(unknown)}; available: {', '.join(datasets)}")
        rows = []
        for name in wanted:
            ds = datasets[name]
            res = evaluate_model(net, TestSet(name, ds.query, ds.gallery), height=cfg.data.height,
                                 width=cfg.data.width, device=dev, flip=flip, metric=metric,
                                 single_gallery_shot=single_gallery_shot)
            rows.append({"testset": name, **res})
        return rows

    rows = _run(go)
    typer.echo(format_table([{"testset": r["testset"], "R1": r["rank1"], "R5": r["rank5"], "R10": r["rank10"],
                              "mAP": r["mAP"], "mINP": r["mINP"]} for r in rows]))
    if json_out:
        json_out.write_text(json.dumps(rows, indent=2))


# --------------------------------------------------------------------------- compare
@app.command()
def compare(
    models: list[Path] = typer.Argument(..., help="Checkpoints to compare (same data)."),
    untrained: bool = typer.Option(True, help="Add a randomly initialised model of the same architecture."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    markdown: Optional[Path] = typer.Option(None, help="Also write the table to this Markdown file."),
) -> None:
    """Compare checkpoints on the same seen and unseen test sets (R1 / mAP / mINP).

    The test sets are those of the first checkpoint's run configuration.

    Example: privreid compare runs/central/ckpt.pt runs/fedpav/ckpt.pt
    """
    from .comparison import compare_checkpoints
    from .reporting import format_table

    rows = _run(compare_checkpoints, models, untrained=untrained, device=device)
    table = format_table(rows)
    typer.echo(table)
    if markdown:
        markdown.write_text(table + "\n")


# --------------------------------------------------------------------------- methods
@app.command()
def methods() -> None:
    """List the registered training methods.

    Example: privreid methods
    """
    from .federated.registry import available_methods, get_method

    for name in available_methods():
        method = get_method(name)
        typer.echo(f"{name:14s} {method.summary}")
        if method.options:
            typer.echo(" " * 15 + "options: " + ", ".join(f"{k}={v}" for k, v in method.options.items()))


# --------------------------------------------------------------------------- data
@data_app.command("synth")
def data_synth(
    out: Path = typer.Option(..., help="Directory to write (must not exist or be empty)."),
    seed: int = typer.Option(0, help="Generator seed (output is deterministic for a seed)."),
    domains: Optional[int] = typer.Option(None, help="Number of domains (default: the demo's)."),
    height: Optional[int] = typer.Option(None, help="Image height (default 128)."),
    width: Optional[int] = typer.Option(None, help="Image width (default 64)."),
    overwrite: bool = typer.Option(False, help="Replace an existing directory."),
) -> None:
    """Write the synthetic multi-domain ReID dataset (Market-1501 layout per domain).

    Example: privreid data synth --out data/synth
    """
    import dataclasses

    from .data.synthetic import SynthConfig, generate_synthetic

    changes = {k: v for k, v in {"seed": seed, "num_domains": domains, "height": height, "width": width}.items()
               if v is not None}
    config = dataclasses.replace(SynthConfig(), **changes)
    path = _run(generate_synthetic, out, config, progress=True, overwrite=overwrite)
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
    from .data.catalog import resolve_datasets

    datasets = _run(resolve_datasets, [str(root)], fmt)
    for name, ds in datasets.items():
        typer.echo(f"== {name} ({ds.root})")
        typer.echo(format_stats_table(ds))


# --------------------------------------------------------------------------- commands defined in privreid/commands/
# (one line per command; keep this block sorted)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
