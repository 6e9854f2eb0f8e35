"""ONNX files, run by onnxruntime (``privreid[onnx]``): features only, no gradients (``differentiable=False``).

The graph's first input takes the normalised images, its first output is the
retrieval feature.  privreid's ONNX export records the input size and mean /
std in ``metadata_props`` (``input_height``, ``input_width``, ``mean``,
``std``); other files take them from the arguments (torchreid's 256x128
ImageNet convention by default).  onnxruntime executes only ONNX operators.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from privreid.dependencies import require
from privreid.errors import CheckpointError
from privreid.models.adapter import ReIDAdapter
from privreid.models.external.files import ModelFile, was_read
from privreid.models.external.report import LoadReport
from privreid.models.external.settings import input_settings


class OnnxFeatures(nn.Module):
    """An onnxruntime session as a module: float32 images in, features out (no autograd)."""

    def __init__(self, session) -> None:
        super().__init__()
        self.session = session
        self.input_name = session.get_inputs()[0].name
        self.output_name = session.get_outputs()[0].name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.session.run([self.output_name], {self.input_name: x.detach().float().cpu().numpy()})[0]
        return torch.from_numpy(out).to(x.device)


def _detect(path: Path, obj: Any) -> bool:
    return not was_read(obj) and path.suffix.lower() == ".onnx"


def _recorded(meta: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "input_height" in meta and "input_width" in meta:
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
    given = input_settings(_recorded(dict(session.get_modelmeta().custom_metadata_map)), options, "torchreid")
    report = LoadReport("ONNX", str(path), "onnxruntime session (features only, no gradients)", 0,
                        settings={**given["settings"], "feature": "the graph's first output", "classifier": "none"})
    return ReIDAdapter(OnnxFeatures(session), None, given["height"], given["width"], given["mean"], given["std"],
                       differentiable=False, report=report)


KINDS = [ModelFile("onnx", "an ONNX file (*.onnx; needs privreid[onnx]), features only", _detect, _load)]
