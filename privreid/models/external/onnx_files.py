"""ONNX files, run by onnxruntime (``privreid[onnx]``): features only, no gradients (``differentiable=False``).

The first input takes the normalised images, the first output is the feature. privreid's export records size
and mean / std in ``metadata_props``; other files take the arguments (torchreid's 256x128 ImageNet convention by
default). A fixed input height and width is the size: another one given is refused in one line at load, and a
batch of another size at run time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from privreid.dependencies import require
from privreid.errors import CheckpointError, ConfigError
from privreid.models.adapter import LoadReport, ReIDAdapter
from privreid.models.external.files import ModelFile, was_read
from privreid.models.external.settings import adapter_of, input_settings


class OnnxFeatures(nn.Module):
    """An onnxruntime session as a module: float32 images in, features out (no autograd)."""

    def __init__(self, session) -> None:
        super().__init__()
        self.session = session
        self.input_name = session.get_inputs()[0].name
        self.output_name = session.get_outputs()[0].name
        self.declared = declared_size(session)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.declared is not None and tuple(x.shape[-2:]) != self.declared:
            raise ConfigError(f"the ONNX model takes {self.declared[0]}x{self.declared[1]} images (its declared "
                              f"input), got {x.shape[-2]}x{x.shape[-1]}")
        out = self.session.run([self.output_name], {self.input_name: x.detach().float().cpu().numpy()})[0]
        return torch.from_numpy(out).to(x.device)


def declared_size(session) -> tuple[int, int] | None:
    """``(height, width)`` of the graph's first input when it declares both as fixed numbers (NCHW), else ``None``."""
    shape = list(session.get_inputs()[0].shape)
    if len(shape) == 4 and all(isinstance(d, int) and d > 0 for d in shape[2:]):
        return int(shape[2]), int(shape[3])
    return None


def _detect(path: Path, obj: Any) -> bool:
    return not was_read(obj) and path.suffix.lower() == ".onnx"


def _recorded(meta: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "input_height" in meta and "input_width" in meta:  # privreid's export
        out.update(height=int(meta["input_height"]), width=int(meta["input_width"]))
    if "mean" in meta and "std" in meta:
        out.update(mean=[float(v) for v in meta["mean"].split(",")], std=[float(v) for v in meta["std"].split(",")])
    return out


def _load(path: Path, obj: Any, options: dict[str, Any]) -> ReIDAdapter:
    ort = require("onnxruntime", "loading an ONNX model")
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise CheckpointError(f"{path} is not an ONNX model onnxruntime can run ({type(exc).__name__})") from None
    recorded = _recorded(dict(session.get_modelmeta().custom_metadata_map))
    declared = declared_size(session)
    if declared is not None:
        for what, size in (("its metadata records", (recorded.get("height"), recorded.get("width"))),
                           ("height / width given", (options.get("height"), options.get("width")))):
            if any(v is not None for v in size) and tuple(v or d for v, d in zip(size, declared)) != declared:
                raise CheckpointError(f"{path} takes {declared[0]}x{declared[1]} images (its declared input), but "
                                      f"{what} {'x'.join(str(v or '?') for v in size)}")
        recorded.update(height=declared[0], width=declared[1])
    report = LoadReport("ONNX", str(path), "onnxruntime session (features only, no gradients)", 0)
    return adapter_of(OnnxFeatures(session), input_settings(recorded, options, "torchreid"), report,
                      "the graph's first output", differentiable=False)


KINDS = [ModelFile("onnx", "an ONNX file (*.onnx; needs privreid[onnx]), features only", _detect, _load)]
