"""``privreid eval``: a checkpoint on the query/gallery split of each dataset, clean or corrupted."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from privreid.errors import ConfigError
from privreid.commands.common import (DATA_HELP, ArchOption, DeviceOption, HeightOption, InterpolationOption, MeanOption, StdOption,
                     WidthOption, csv_list, load_models_or_exit, run_or_exit)
from privreid.commands.options import PrecisionOption

if TYPE_CHECKING:
    import torch

    from privreid.malicious_clients.backdoor import RecordedBackdoor


def eval_command(
    model: Path = typer.Option(..., "--model", help="Checkpoint (ckpt.pt) to evaluate, or a model trained "
                               "elsewhere: a torchreid or fast-reid checkpoint, a torchvision ResNet state dict, "
                               "a privreid export, TorchScript or ONNX (docs/models.md; give --data)."),
    arch: ArchOption = None,
    height: HeightOption = None,
    width: WidthOption = None,
    mean: MeanOption = None,
    std: StdOption = None,
    interpolation: InterpolationOption = None,
    data: Optional[list[str]] = typer.Option(None, "--data", help=DATA_HELP + " Default: the checkpoint's data."),
    domains: Optional[str] = typer.Option(None, help="Comma-separated domains to test on (default: all)."),
    client: Optional[str] = typer.Option(None, help="Evaluate this client's personalised model."),
    flip: bool = typer.Option(False, help="Average features of the image and its mirror."),
    metric: str = typer.Option("euclidean", help="euclidean or cosine."),
    ap: str = typer.Option("torchreid", "--ap", help="Average precision: torchreid (over queries with a positive) "
                           "or devkit (the Market-1501 devkit's trapezoid rule over all queries, as FedPav's and "
                           "Wu & Gong's code; Market-style and small DG test sets only)."),
    single_gallery_shot: bool = typer.Option(False, help="CUHK03 protocol: one gallery image per identity, "
                                             "averaged over 10 repeats."),
    mode: Optional[str] = typer.Option(None, "--mode", help="Visible-infrared data only: ir-to-visible "
                                       "(default; infrared queries, visible gallery, as L2RW+ reports) or "
                                       "visible-to-ir."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Video data only: frames T per tracklet "
                                          "whose features are averaged (L2RW+ Eq. 9); default: the dataset's "
                                          "(6 for HITSZ-VCM and vi-folders, 10 for BUPTCampus)."),
    device: DeviceOption = "auto",
    precision: PrecisionOption = "fp32",
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the results as JSON."),
    fmt: str = typer.Option("auto", "--format", help="Layout of the --data roots (auto-detected by default). "
                            "The small DG benchmarks (viper, grid, prid, ilids, 3dpes, caviar, cuhk01, cuhk02, "
                            "cuhksysu, ilidsvid; grid-crosscam / caviar-crosscam for FedPav's Table 5, "
                            "cuhksysu-g100 for CUHK-SYSU's TestG100) are "
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
    from privreid.commands.corrupt import parse_pixel_scale
    from privreid.corruptions import resolve_corruptions
    from privreid.data.catalog import resolve_datasets, verify_datasets
    from privreid.data.partition import as_test_set
    from privreid.evaluation.backdoor import backdoor_columns, evaluate_backdoor
    from privreid.evaluation.corrupted_eval import check_corruption_options, is_scaled
    from privreid.evaluation.corrupted_eval import evaluate_testset
    from privreid.evaluation.model_eval import check_eval_options
    from privreid.device import resolve_device
    from privreid.precision import at_precision, check_precision
    from privreid.reporting import format_table

    def corruption_options() -> dict:
        if severity != "random" and not (severity.isascii() and severity.isdigit()):  # isdigit() alone takes a superscript
            raise ConfigError(f"--severity must be an integer from 1 to 5 or 'random', got {severity!r}")
        options = dict(severity=severity if severity == "random" else int(severity), corrupt=corrupt,
                       repeats=repeats, seed=seed, pixel_scale=parse_pixel_scale(pixel_scale))
        check_corruption_options(**options)
        return dict(corruptions=resolve_corruptions(csv_list(corruption) or []), **options)

    file_options = dict(arch=arch, height=height, width=width, mean=mean, std=std, interpolation=interpolation)
    kinds = dict(mode=mode, seq_len=seq_len, corrupted=corruption is not None, single_gallery_shot=single_gallery_shot)

    def go() -> list[dict]:
        if is_dg_eval_format(fmt):
            return dg_rows()
        if splits is not None:  # never silently ignored
            raise ConfigError(f"--splits reuses the splits of a small DG benchmark (--format viper, grid ...); "
                              f"--format {fmt} has none")
        corrupted = corruption_options() if corruption is not None else None
        check_eval_options([], **kinds)
        dev = resolve_device(device)
        check_precision(precision, dev)
        loaded = load_eval_model(model, client=client, file_options=file_options, device=dev, data=data)
        net = at_precision(loaded.net, precision, dev)
        datasets = resolve_datasets(data or loaded.roots, loaded.format if not data else fmt)
        wanted = csv_list(domains) or list(datasets)
        unknown = [d for d in wanted if d not in datasets]
        if unknown:
            raise ConfigError(f"unknown domain(s) {', '.join(unknown)}; available: {', '.join(datasets)}")
        verify_datasets({name: datasets[name] for name in wanted}, splits=("query", "gallery"))
        testsets = [as_test_set(name, datasets[name]) for name in wanted]
        check_eval_options(testsets, **kinds)
        rows = []
        for testset in testsets:
            rows.append(evaluate_testset(net, testset, corrupted=corrupted, mode=mode, seq_len=seq_len,
                                         height=loaded.height, width=loaded.width, device=dev, flip=flip,
                                         metric=metric, ap=ap, single_gallery_shot=single_gallery_shot,
                                         interpolation=loaded.interpolation, progress=True))
            if loaded.backdoor is not None and corrupted is None:  # the run's trigger on every query
                measured = evaluate_backdoor(net, testset, loaded.backdoor, height=loaded.height,
                                             width=loaded.width, device=dev, flip=flip, metric=metric)
                rows[-1].update({"backdoor": {"trigger": loaded.backdoor.describe(), **measured}} if measured else {})
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
        dev = resolve_device(device)
        check_precision(precision, dev)
        loaded = load_eval_model(model, client=client, file_options=file_options, device=dev, data=data)
        rows = []
        for root in data:
            name = Path(root).name
            written = json_out.with_name(f"{json_out.stem}-{name}-splits.json") if json_out else None
            result = evaluate_dg_model(at_precision(loaded.net, precision, dev), root, fmt, height=loaded.height, width=loaded.width, device=dev,
                                       flip=flip, metric=metric, ap=ap, num_splits=num_splits, seed=seed,
                                       splits_file=splits, write_splits_to=written,
                                       interpolation=loaded.interpolation)
            rows.append({"testset": f"{name} ({result['protocol']})", **result})
        return rows

    from privreid.evaluation.dg_protocol import evaluate_dg_model, is_dg_eval_format
    from privreid.evaluation.metric_registry import headline, summary_columns
    from privreid.rundir import check_output_file, write_text_atomic

    run_or_exit(check_output_file, json_out, "--json")
    rows = run_or_exit(go)
    if rows and "protocol" in rows[0]:
        typer.echo(format_table([{"testset": r["testset"], **{key: f"{100 * r[k]:.1f}" + (
            f" ({100 * r['std'][k]:.1f})" if "std" in r else "") for k, key in summary_columns()}}
            for r in rows]))
        typer.echo(f"mean (std) over {rows[0]['splits']} split(s), seed {rows[0]['seed']}" if "std" in rows[0]
                   else "mean over the queries, each ranked against its own gallery" if rows[0]["protocol"] == "g100"
                   else "mean over the queries, ranked against one gallery")
    elif corruption is None:
        typer.echo(format_table([{"testset": r["testset"] + (f" ({r['mode']})" if "mode" in r else ""),
                                  **{label: r[k] for k, label in summary_columns()}} for r in rows]))
        measured = [r for r in rows if "backdoor" in r]
        if measured:
            typer.echo(f"backdoor of the run: {measured[0]['backdoor']['trigger']}, its whole trigger on every query "
                       "(ASR: rank-1 is the target, over the queries of other identities)")
            typer.echo(format_table([{"testset": r["testset"], **backdoor_columns(r["backdoor"])} for r in measured]))
    else:
        def mean_std(r: dict, key: str) -> str:
            return f"{100 * r['mean'][key]:.1f} ({100 * r['std'][key]:.1f})"

        typer.echo(format_table([{"testset": r["testset"],
                                  **{f"clean {label}": r["clean"][k] for k, label in headline()},
                                  **{label: mean_std(r, k) for k, label in headline()}} for r in rows]))
        deviations = rows[0]["deviations"] if rows else []
        protocol = "CIL-ReID protocol" + (", scaled" if rows and is_scaled(rows[0]["pixel_scale"]) else "")
        typer.echo(f"corrupted {corrupt} ({protocol}): {', '.join(rows[0]['corruptions']) if rows else '-'}; "
                   f"severity {severity}; pixel scale {pixel_scale}; mean (std) over {repeats} repeat(s), seed {seed}")
        for line in deviations:
            typer.echo(f"deviation: {line}")
    if json_out:
        run_or_exit(write_text_atomic, json_out, json.dumps(rows, indent=2))


@dataclass
class EvalModel:
    """The network ``privreid eval`` ranks with, its input size, and the data it defaults to."""

    net: torch.nn.Module
    height: int
    width: int
    roots: list[str]
    format: str
    #: the trigger a privreid checkpoint's run trained with (``--adversary backdoor`` / ``dba``)
    backdoor: RecordedBackdoor | None = None
    #: the test resize (a file's convention or ``--interpolation``; bilinear for a privreid checkpoint)
    interpolation: str = "bilinear"


def load_eval_model(path: Path, *, client: Optional[str], file_options: dict, device, data) -> EvalModel:
    """A privreid checkpoint (its global or ``client``'s model, its data and input size), or any model file
    :func:`privreid.models.external.load_any_model` reads (its input size from the file or the defaults; the
    load report printed in one line; ``--data`` required); :mod:`privreid.models.evaluated`."""
    from privreid.malicious_clients.backdoor import recorded_backdoor
    from privreid.models.evaluated import data_source

    [model] = load_models_or_exit([path], **file_options)
    source = data_source([model], data)
    backdoor = recorded_backdoor(model.checkpoint.run_config) if model.checkpoint is not None else None
    return EvalModel(model.network(client, device=device), *model.input_size, source.roots, source.format, backdoor,
                     model.interpolation)
