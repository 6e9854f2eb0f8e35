"""Exporting a trained model for use outside privreid: a plain state dict, torchreid's ResNet, or ONNX.

Every format holds :meth:`privreid.checkpoint.Checkpoint.load_model`'s model (global or personalised) in eval
mode: images of the run's ``height x width``, ImageNet-normalised, in; the retrieval feature out. Each file
records the input size, mean and std.

``state-dict``: ``torch.save`` of plain tensors and primitives (``torch.load(weights_only=True)``):
``state_dict``, ``model_config`` (``build_from_config(model_config).load_state_dict(state_dict)`` is strict),
``input``, ``source``. ``privreid train --weights`` reads it.

``torchreid``: the weights under torchreid's ``ResNet`` key names (deep-person-reid
``torchreid/models/resnet.py``): the trunk's ``backbone.`` prefix dropped, the linear neck as its ``fc`` block
(``fc.0``, ``fc.1``; ``fc_dims=[feat_dim]``), a linear classifier with a zero bias; ``{"state_dict": ...,
"torchreid": {arch, last_stride, fc_dims, num_classes}}`` as ``load_pretrained_weights`` reads
(``fc_dims=[512], last_stride=1`` is ``resnet50_fc512``). Deviations (torchreid's architecture): its ``fc``
ends with a ReLU, so its feature is ``relu(f)``; it has no BNNeck, so a ``bnneck`` model exports the trunk only
(``fc_dims=None``). GroupNorm, attentive norms and FedARKS' part branch are refused; FedReID's MLP classifier
and SKA's unused norm copies are left out.

``onnx``: ``torch.onnx.export`` (the ``torch.export`` exporter; for graphs it cannot capture, like FedARKS'
data-dependent fusion switch, the TorchScript tracer, which fixes the switch), ``images`` ``(batch, 3, H, W)``
-> ``features`` ``(batch, feat_dim)``, dynamic batch; size, mean, std and source in ``metadata_props``. Checked
with onnxruntime against torch before :func:`export_model` returns. Needs ``privreid[export]``.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from privreid import __version__
from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from privreid.dependencies import require
from privreid.errors import ConfigError
from privreid.models import ReIDModel
from privreid.models.reid_net import CLASSIFIER_PREFIX
from privreid.io import save_torch_atomic, write_file_atomically

FORMATS = ("state-dict", "torchreid", "onnx")
#: largest |onnxruntime - torch| accepted, relative to the largest |feature| (float32 round-off of a ResNet)
ONNX_TOLERANCE = 1e-4


def check_format(fmt: str) -> None:
    """Raise :class:`ConfigError` for an unknown format, :class:`MissingDependencyError` for a missing extra."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "onnx":
        for name in ("onnx", "onnxscript", "onnxruntime"):
            require(name)


def torchreid_config(model: ReIDModel) -> dict[str, Any]:
    """Arguments of torchreid's ``ResNet`` that hold ``model``'s weights; ConfigError when it has none."""
    unsupported = [what for what, present in (
        ("GroupNorm layers (DP training)", model.has_transform("group_norm")),
        ("SKA's attentive normalisation", model.has_transform("attentive_norm")),
        ("FedARKS' part branch", model.has_transform("part_branch"))) if present]
    if unsupported:
        raise ConfigError(f"--format torchreid: torchreid's ResNet has no {' or '.join(unsupported)}; "
                          "export this model as state-dict or onnx")
    linear_head = isinstance(model.classifier, torch.nn.Linear)
    return {"arch": model.arch, "last_stride": model.last_stride,
            "fc_dims": [model.feat_dim] if model.neck_kind == "linear" else None,
            "num_classes": model.num_classes if linear_head else 0}


def torchreid_state_dict(model: ReIDModel) -> dict[str, torch.Tensor]:
    """``model``'s weights under torchreid ``ResNet``'s key names (see the module docstring)."""
    config = torchreid_config(model)
    out: dict[str, torch.Tensor] = {}
    for key, value in model.state_dict().items():
        value = value.detach().cpu().clone()
        if key.startswith("backbone."):
            out[key.removeprefix("backbone.")] = value
        elif key.startswith("neck.") and config["fc_dims"] is not None:
            layer, _, rest = key.removeprefix("neck.").partition(".")
            out[f"fc.{ {'fc': 0, 'bn': 1}[layer] }.{rest}"] = value
        elif key == CLASSIFIER_PREFIX + "weight" and config["num_classes"]:  # torchreid's names are the same
            out["classifier.weight"] = value
            out["classifier.bias"] = torch.zeros(value.shape[0], dtype=value.dtype)
    return out


@contextlib.contextmanager
def _quiet():
    """The exporters' progress lines and deprecation warnings stay out of the command's output."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _onnx_export(model: ReIDModel, example: torch.Tensor, path: Path) -> str:
    """Write ``model`` as ONNX; the exporter used (``torch.export``, else the TorchScript tracer)."""
    names = dict(input_names=["images"], output_names=["features"])
    try:
        with _quiet():
            torch.onnx.export(model, (example,), str(path), dynamo=True, external_data=False, verbose=False,
                              dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1)}}, **names)
        return "torch.export"
    except torch.onnx.OnnxExporterError:  # a graph torch.export cannot capture (see the module docstring)
        pass
    with _quiet():
        torch.onnx.export(model, (example,), str(path), dynamo=False, verbose=False,
                          dynamic_axes={"images": {0: "batch"}, "features": {0: "batch"}}, **names)
    return "torchscript"


def _onnx_check(path: Path, model: ReIDModel, spec: dict[str, Any]) -> float:
    """Largest |onnxruntime - torch| on a batch of 3 random images, relative to the largest |feature|."""
    ort = require("onnxruntime")
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(3, 3, spec["height"], spec["width"], generator=generator)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = torch.from_numpy(session.run(["features"], {"images": images.numpy()})[0])
    with torch.no_grad():
        want = model(images)
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-12))


def export_model(model: ReIDModel, fmt: str, out: str | os.PathLike, *, height: int, width: int,
                 source: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``model`` (in eval mode on the CPU) to ``out`` in ``fmt``; returns ``path``, ``format``,
    ``feat_dim``, ``input`` and ``torchreid`` (the ResNet arguments) or ``exporter`` and ``onnx_max_rel_diff``.
    ConfigError for an unknown format or a model it cannot hold; MissingDependencyError for ONNX without
    ``privreid[export]``."""
    check_format(fmt)
    out = Path(out)
    model = model.cpu().eval()
    # what the exported model expects: image size and the normalisation applied to [0, 1] pixels
    spec = {"height": int(height), "width": int(width), "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD),
            "layout": "NCHW, RGB, (pixels / 255 - mean) / std"}
    source = dict(source or {})
    report: dict[str, Any] = {"path": str(out), "format": fmt, "feat_dim": model.feat_dim, "input": spec}
    if fmt == "state-dict":
        save_torch_atomic({"format": "privreid-state-dict-v1", "privreid_version": __version__,
                           "state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                           "model_config": model.model_config(), "input": spec, "source": source}, out)
    elif fmt == "torchreid":
        report["torchreid"] = torchreid_config(model)
        save_torch_atomic({"state_dict": torchreid_state_dict(model), "torchreid": report["torchreid"],
                           "privreid_version": __version__, "input": spec, "source": source}, out)
    else:
        onnx = require("onnx")

        def write(tmp: Path) -> None:
            report["exporter"] = _onnx_export(model, torch.zeros(2, 3, height, width), tmp)
            proto = onnx.load(str(tmp))
            meta = {"privreid_version": __version__, "input_height": height, "input_width": width,
                    "mean": spec["mean"], "std": spec["std"], **{f"source_{k}": v for k, v in source.items()}}
            for key, value in meta.items():
                entry = proto.metadata_props.add()
                entry.key, entry.value = key, ",".join(map(str, value)) if isinstance(value, list) else str(value)
            onnx.save(proto, str(tmp))
            report["onnx_max_rel_diff"] = _onnx_check(tmp, model, spec)
            if not report["onnx_max_rel_diff"] <= ONNX_TOLERANCE:
                raise RuntimeError(f"the ONNX graph does not reproduce the model (relative difference "
                                   f"{report['onnx_max_rel_diff']:.2e}); please report this")

        write_file_atomically(out, write, stream=False)  # ONNX is read back: a file, never a stream
    return report
