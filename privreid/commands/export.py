"""``privreid export``: a checkpoint's global or personalised model as a plain state dict, for torchreid, or ONNX."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from privreid.commands.common import run_or_exit


def export_command(
    model: Path = typer.Option(..., "--model", help="A privreid checkpoint (ckpt.pt)."),
    client: Optional[str] = typer.Option(None, help="Export this client's personalised model (default: the "
                                         "global model)."),
    fmt: str = typer.Option("state-dict", "--format", help="state-dict (torch.load / build_model), torchreid "
                            "(torchreid's ResNet key names) or onnx (onnxruntime; needs privreid\\[export])."),
    out: Path = typer.Option(..., help="File to write."),
    overwrite: bool = typer.Option(False, help="Replace an existing --out file."),
) -> None:
    """Export the global model (or a client's personalised one) for use outside privreid.

    The exported model maps ImageNet-normalised images of the run's size to the
    retrieval feature; every file records the input size, mean and std.
    Formats and their deviations: privreid/export.py.

    Example: privreid export --model runs/fedpav/ckpt.pt --format onnx --out fedpav.onnx
    """
    from privreid.api import export_checkpoint

    report = run_or_exit(export_checkpoint, model, out, fmt=fmt, client=client, overwrite=overwrite)
    spec = report["input"]
    typer.echo(f"wrote {report['path']} ({fmt}, {'global model' if client is None else f'client {client}'}, "
               f"{report['feat_dim']}-d feature, input {spec['height']}x{spec['width']} ImageNet-normalised)")
    if fmt == "torchreid":
        tr = report["torchreid"]
        typer.echo(f"torchreid: ResNet({tr['arch']}, last_stride={tr['last_stride']}, fc_dims={tr['fc_dims']}, "
                   f"num_classes={tr['num_classes'] or 'any'}); its feature is "
                   + ("relu(privreid's feature)" if tr["fc_dims"] else "the pooled trunk feature (no BNNeck)"))
    if fmt == "onnx":
        typer.echo(f"onnx: exported with {report['exporter']}; onnxruntime matches torch to "
                   f"{report['onnx_max_rel_diff']:.1e} (relative)")
