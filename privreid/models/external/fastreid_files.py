"""fast-reid checkpoints (JDAI-CV/fast-reid, ``Baseline`` with a ResNet backbone and its ``EmbeddingHead``).

The checkpointer saves ``{"model": state_dict, "optimizer", "scheduler", "iteration"}``. Keys
(``fastreid/modeling``): the trunk under ``backbone.``; ``heads.bottleneck``, an optional 1x1 embedding conv
and the BNNeck's BatchNorm; the classifier ``heads.weight`` (no bias). In eval mode the head returns the
bottleneck output, the retrieval feature here. Kept: fast-reid's max-pool (``MaxPool2d(3, 2, ceil_mode=True)``,
no padding) and last stride 1. Assumed: ``GlobalAvgPool`` (a weighted pooling like GeM is refused) and a
``Linear`` classifier (cosine heads normalise both sides). ``pixel_mean`` / ``pixel_std`` (0-255) are read when
present, else ImageNet's. IBN, non-local blocks and other backbones are refused with the unmapped keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from privreid.errors import CheckpointError
from privreid.models.adapter import LoadReport, ReIDAdapter
from privreid.models.external.files import ModelFile, strip_prefix, tensor_dict
from privreid.models.external.resnet_trunk import TrunkHead, batch_norm, build_trunk, linear, trunk_keys
from privreid.models.external.settings import adapter_of, input_settings

#: fast-reid's default ``MODEL.BACKBONE.LAST_STRIDE``
FASTREID_LAST_STRIDE = 1
#: keys of fast-reid's Baseline that hold no model weights privreid needs
_IGNORABLE = {"pixel_mean": "input normalisation (read)", "pixel_std": "input normalisation (read)"}


def _state(obj: Any) -> dict | None:
    return tensor_dict(strip_prefix(obj["model"])) if isinstance(obj, dict) and "model" in obj else None


def _detect(path: Path, obj: Any) -> bool:
    state = _state(obj)
    return state is not None and "backbone.conv1.weight" in state and any(k.startswith("heads.") for k in state)


def _bottleneck(state: dict[str, Any]) -> tuple[nn.Module, set[str], str]:
    """The head's bottleneck as a module on the pooled feature, the keys it used, and what it is."""
    layers: list[nn.Module] = []
    names: list[str] = []
    used: set[str] = set()
    conv = state.get("heads.bottleneck.0.weight")
    if conv is not None and conv.dim() == 4:  # the 1x1 embedding conv on the pooled map == a Linear, no bias
        layers.append(linear(conv.flatten(1), None))
        names.append("embedding conv")
        used.add("heads.bottleneck.0.weight")
    prefix = f"heads.bottleneck.{len(layers)}."
    if f"{prefix}running_mean" in state:
        layers.append(batch_norm(state, prefix))
        names.append("BNNeck")
        used |= {k for k in state if k.startswith(prefix)}
    what = " + ".join(names) or "no bottleneck"
    return nn.Sequential(*layers), used, what


def _load(path: Path, obj: dict[str, Any], options: dict[str, Any]) -> ReIDAdapter:
    state = _state(obj)
    backbone = {k.removeprefix("backbone."): v for k, v in state.items() if k.startswith("backbone.")}
    unmapped = sorted(f"backbone.{k}" for k in set(backbone) - set(trunk_keys(backbone)))
    if unmapped:
        raise CheckpointError(f"{path}: fast-reid backbone keys privreid's ResNet does not have (IBN, non-local "
                              f"or another backbone?): {', '.join(unmapped[:3])}")
    last_stride = options.get("last_stride") or FASTREID_LAST_STRIDE
    trunk = build_trunk(backbone, str(path), arch=options.get("arch"), last_stride=last_stride)
    trunk.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True)  # fast-reid's (module docstring)
    head, used, what = _bottleneck(state)
    used |= {f"backbone.{k}" for k in backbone}
    classifier = None
    if "heads.weight" in state:
        classifier = linear(state["heads.weight"], None)
        used.add("heads.weight")
    unknown = sorted(k for k in state if k not in used and k not in _IGNORABLE)
    if unknown:
        raise CheckpointError(f"{path}: fast-reid head keys that do not map (a pooling or head other than "
                              f"GlobalAvgPool + BNNeck + Linear?): {', '.join(unknown[:3])}")
    recorded = {}
    if "pixel_mean" in state and "pixel_std" in state:
        recorded = {"mean": [float(v) / 255 for v in state["pixel_mean"].flatten()],
                    "std": [float(v) / 255 for v in state["pixel_std"].flatten()]}
    ignored = {k: reason for k, reason in _IGNORABLE.items() if k in state}
    report = LoadReport("fast-reid checkpoint", str(path), f"backbone -> {trunk.arch} (last stride {last_stride}, "
                        f"ceil-mode max-pool), heads.bottleneck -> {what}", len(used), ignored)
    return adapter_of(TrunkHead(trunk, head).eval(), input_settings(recorded, options, "fast-reid"), report,
                      f"after the head's bottleneck ({what}), fast-reid's eval feature",
                      f"{classifier.out_features} identities (CLS_LAYER Linear assumed)" if classifier else "none",
                      classifier=classifier)


KINDS = [ModelFile("fast-reid", "a fast-reid checkpoint (ResNet backbone, EmbeddingHead with BNNeck)",
                   _detect, _load)]
