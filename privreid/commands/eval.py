"""``privreid eval``: a checkpoint on the query/gallery split of each dataset, clean or corrupted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from privreid.commands.common import (DATA_HELP, ArchOption, DeviceOption, HeightOption, InterpolationOption,
                                      MeanOption, StdOption, WidthOption, run_or_exit)
from privreid.commands.options import CompileOption, PrecisionOption


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
    compile_model: CompileOption = False,
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
    from privreid.api import evaluate_checkpoint
    from privreid.io import write_text_atomic
    from privreid.models.compilation import CompileClock, compile_line
    from privreid.reporting.tables import eval_report
    from privreid.rundir import check_output_file

    run_or_exit(check_output_file, json_out, "--json")
    with CompileClock() as clock:
        rows = run_or_exit(evaluate_checkpoint, model, data, fmt=fmt, domains=domains, client=client, flip=flip,
                           metric=metric, ap=ap, single_gallery_shot=single_gallery_shot, mode=mode,
                           seq_len=seq_len, device=device, precision=precision, compile=compile_model,
                           json_out=json_out, splits=splits, num_splits=num_splits, corruption=corruption,
                           severity=severity, corrupt=corrupt, repeats=repeats, seed=seed, pixel_scale=pixel_scale,
                           announce=typer.echo, arch=arch, height=height, width=width, mean=mean, std=std,
                           interpolation=interpolation)
    if compile_model:
        typer.echo(compile_line(clock.seconds))
    typer.echo(eval_report(rows, corruption=corruption, corrupt=corrupt, severity=severity, pixel_scale=pixel_scale,
                           repeats=repeats, seed=seed))
    if json_out:
        run_or_exit(write_text_atomic, json_out, json.dumps(rows, indent=2))
