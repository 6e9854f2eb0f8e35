"""torchreid checkpoints (``model.pth.tar-N``) and privreid's ``export --format torchreid``.

torchreid (KaiyangZhou/deep-person-reid, ``torchreid/models/resnet.py``) saves ``{"state_dict", "epoch",
"rank1", "optimizer", ...}`` (``module.`` under DataParallel). Its ``ResNet``: the trunk, an optional ``fc``
block ``Linear -> BatchNorm1d -> ReLU`` and ``classifier = Linear(feature_dim, num_classes)``; in eval mode it
returns the pooled feature after ``fc``, the retrieval feature here. It records neither architecture nor input
size. With ``privreid[torchreid]`` every architecture is built by torchreid (:mod:`.torchreid_models`; the name
from ``--arch``, a ResNet's keys, or :func:`~.torchreid_models.infer_torchreid_name`). Without it, ResNet-18/34/50
map onto privreid's ResNet (last stride 2 unless ``last_stride``), anything else is refused in one line naming
the extra. privreid's export records ``torchreid`` (arch, last stride) and ``input``.
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
from privreid.models.external.torchreid_models import (TORCHREID_EXTRA, build_torchreid_model,
                                                        infer_torchreid_name, resnet_name, torchreid_installed)
from privreid.models.resnet import ARCHS

#: torchreid's ResNet default last stride (``resnet18/34/50``; its ``*_fc512`` variants use 1)
TORCHREID_LAST_STRIDE = 2


def _state(obj: Any) -> dict | None:
    return tensor_dict(strip_prefix(obj["state_dict"])) if isinstance(obj, dict) and "state_dict" in obj else None


def _detect(path: Path, obj: Any) -> bool:
    return _state(obj) is not None


def _load(path: Path, obj: dict[str, Any], options: dict[str, Any]) -> ReIDAdapter:
    state = _state(obj)
    recorded = obj.get("torchreid") if isinstance(obj.get("torchreid"), dict) else {}
    arch = recorded.get("arch") or options.get("arch")
    last_stride = recorded.get("last_stride") or options.get("last_stride")
    if torchreid_installed():
        model, classifier, mapping = build_torchreid_model(_torchreid_name(path, state, arch), state, str(path),
                                                           last_stride=last_stride)
        if arch is None:
            mapping += " (the architecture read from the weights' names and shapes; torchreid files do not record it)"
        return _adapter(path, obj, options, model, classifier, mapping, len(state), {},
                        "the module's output in eval mode, torchreid's eval feature")
    if resnet_name(state) is None or (arch is not None and arch not in ARCHS):
        raise CheckpointError(f"{path} is a torchreid checkpoint of {arch or 'an architecture other than ResNet'}: "
                              f"privreid reads torchreid's ResNet-18/34/50 itself and builds every other torchreid "
                              f"architecture with torchreid: {TORCHREID_EXTRA}")
    last_stride = last_stride or TORCHREID_LAST_STRIDE
    trunk = build_trunk(state, str(path), arch=arch, last_stride=last_stride)
    used = set(trunk_keys(state))
    if "fc.0.weight" in state:  # Linear -> BatchNorm1d -> ReLU (one fc dim; torchreid's fc_dims=[d])
        head: nn.Module = nn.Sequential(linear(state["fc.0.weight"], state.get("fc.0.bias")),
                                        batch_norm(state, "fc.1."), nn.ReLU())
        used |= {k for k in state if k.startswith(("fc.0.", "fc.1."))}
        feature = "the fc block's output (Linear, BatchNorm1d, ReLU), torchreid's eval feature"
    else:
        head, feature = nn.Identity(), "the pooled trunk feature, torchreid's eval feature"
    classifier = None
    if "classifier.weight" in state:
        classifier = linear(state["classifier.weight"], state.get("classifier.bias"))
        used |= {"classifier.weight", "classifier.bias"}
    ignored = {k: "not part of torchreid's ResNet" for k in state if k not in used}
    return _adapter(path, obj, options, TrunkHead(trunk, head).eval(), classifier,
                    f"torchreid ResNet -> {trunk.arch} (last stride {last_stride})", len(used & set(state)), ignored,
                    feature)


def _torchreid_name(path: Path, state: dict[str, Any], arch: str | None) -> str:
    """``--arch`` (or the export's record), else the ResNet the keys show, else the torchreid model with the
    file's weight names and shapes; a torchreid file names no architecture."""
    name = arch or resnet_name(state) or infer_torchreid_name(state)
    if name is None:
        raise CheckpointError(f"{path} holds a state dict whose weights match none of torchreid's models, and "
                              "torchreid files do not record their architecture: name it with --arch (`privreid "
                              "methods` lists torchreid's models)")
    return name


def _adapter(path: Path, obj: dict[str, Any], options: dict[str, Any], model: nn.Module,
             classifier: nn.Module | None, mapping: str, mapped: int, ignored: dict[str, str],
             feature: str) -> ReIDAdapter:
    given = input_settings(obj.get("input") if isinstance(obj.get("input"), dict) else None, options, "torchreid")
    kind = "privreid torchreid export" if "torchreid" in obj else "torchreid checkpoint"
    return adapter_of(model, given, LoadReport(kind, str(path), mapping, mapped, ignored), feature,
                      f"{classifier.out_features} identities" if classifier else "none", classifier=classifier)


def _detect_torchvision(path: Path, obj: Any) -> bool:
    state = tensor_dict(strip_prefix(obj)) if isinstance(obj, dict) else None
    return state is not None and "conv1.weight" in state and "layer1.0.conv1.weight" in state


def _load_torchvision(path: Path, obj: dict[str, Any], options: dict[str, Any]) -> ReIDAdapter:
    """A plain torchvision ResNet state dict: the pooled trunk feature; ``fc`` is ImageNet's classifier."""
    state = strip_prefix(obj)
    last_stride = options.get("last_stride") or TORCHREID_LAST_STRIDE
    trunk = build_trunk(state, str(path), arch=options.get("arch"), last_stride=last_stride)
    used = set(trunk_keys(state))
    ignored = {k: ("an ImageNet-style classifier, not an identity classifier" if k.startswith("fc.")
                   else "not part of a ResNet trunk") for k in state if k not in used}
    report = LoadReport("torchvision ResNet state dict", str(path), f"trunk -> {trunk.arch} (last stride "
                        f"{last_stride})", len(used), ignored)
    return adapter_of(trunk.eval(), input_settings(None, options, "torchvision"), report, "the pooled trunk feature")


KINDS = [
    ModelFile("torchreid", "a torchreid checkpoint (model.pth.tar-N, any torchreid.models architecture) or privreid "
              "export --format torchreid",
              _detect, _load),
    ModelFile("torchvision", "a plain torchvision ResNet state dict (resnet18/34/50)",
              _detect_torchvision, _load_torchvision),
]
