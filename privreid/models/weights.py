"""Initialising models from torchvision's ImageNet weights or local state dicts.

:func:`load_imagenet_weights` fetches torchvision's IMAGENET1K_V1 (torch hub; a cached copy is used). These
machines have no internet, so a failure is a one-line ConfigError pointing at :func:`load_weights_file`
(``--weights FILE``, read with ``torch.load(..., weights_only=True)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from pathlib import Path

import torch
from torch import nn

from privreid.errors import ConfigError
from privreid.models.resnet import ResNet
from privreid.pickle_scan import safe_torch_load

# arch -> name of torchvision's weight enum; the IMAGENET1K_V1 member is used.
IMAGENET_WEIGHTS = {
    "resnet18": "ResNet18_Weights",
    "resnet34": "ResNet34_Weights",
    "resnet50": "ResNet50_Weights",
}

# Classification-head keys of trunk-style files (torchvision's fc, torchreid's
# classifier): never loaded into the trunk.
_TRUNK_HEAD_PREFIXES = ("fc.", "classifier.")
_MAX_LISTED = 3


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def _listing(keys: list[str]) -> str:
    shown = ", ".join(keys[:_MAX_LISTED])
    return f"{shown}, ... ({len(keys)} in all)" if len(keys) > _MAX_LISTED else shown


def _required(key: str) -> bool:
    # BatchNorm recreates a missing num_batches_tracked counter itself.
    return not key.endswith("num_batches_tracked")


def load_imagenet_weights(trunk: ResNet) -> list[str]:
    """Load torchvision's IMAGENET1K_V1 weights into ``trunk`` (strict, ``fc.*`` dropped); the loaded keys.
    ConfigError when they cannot be downloaded or do not fit (norm layers other than BatchNorm)."""
    import torchvision.models

    enum = getattr(torchvision.models, IMAGENET_WEIGHTS[trunk.arch]).IMAGENET1K_V1
    try:
        state = enum.get_state_dict(progress=False, check_hash=True)
    except Exception as err:  # any network, cache or hash failure
        raise ConfigError(
            f"could not download ImageNet weights {enum} for {trunk.arch} ({_one_line(err)}); "
            "offline, pass a local state dict with --weights FILE"
        ) from err
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    target = trunk.state_dict()
    missing = [k for k in target if _required(k) and k not in state]
    unexpected = [k for k in state if k not in target]
    mismatched = [k for k in state if k in target and state[k].shape != target[k].shape]
    if missing or unexpected or mismatched:
        problems = [
            f"{label}: {_listing(keys)}"
            for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape mismatch", mismatched))
            if keys
        ]
        raise ConfigError(
            f"ImageNet weights {enum} do not fit this {trunk.arch} trunk ({'; '.join(problems)}); "
            "load them into a BatchNorm trunk, then call replace_norm_layers"
        )
    trunk.load_state_dict(state, strict=False)
    return list(state)


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    if not path.exists():
        raise ConfigError(f"weights file {path} does not exist")
    try:
        obj = safe_torch_load(path, map_location="cpu")
    except Exception as err:  # unpickling, zip or I/O errors
        raise ConfigError(f"cannot read weights file {path} ({_one_line(err)})") from err

    def is_state(o: object) -> bool:
        return isinstance(o, Mapping) and all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in o.items()
        )

    if not is_state(obj) and isinstance(obj, Mapping):
        # torchreid / fast-reid checkpoints wrap the weights.
        obj = next((obj[k] for k in ("state_dict", "model") if is_state(obj.get(k))), obj)
    if not is_state(obj):
        raise ConfigError(f"weights file {path} does not hold a state dict (a mapping of names to tensors)")
    state = dict(obj)
    if state and all(k.startswith("module.") for k in state):  # saved from DataParallel
        state = {k.removeprefix("module."): v for k, v in state.items()}
    return state


def load_weights_file(model: nn.Module, path: str | PathLike[str]) -> list[str]:
    """Load a local state dict into a :class:`~privreid.models.ReIDModel`; the loaded keys.

    Trunk-style keys (torchvision / torchreid: ``conv1.weight``) go into ``model.backbone`` (``fc.*`` /
    ``classifier.*`` ignored); full-model keys (``backbone.*``, ``neck.*``, ``classifier.*``) load as named,
    ``classifier.*`` skipped without a matching classifier, the neck kept when absent. The whole trunk must be
    present; ``state_dict`` / ``model`` wrappers and ``module.`` prefixes are unwrapped. ConfigError naming the
    file when it is missing, unreadable, no state dict, unmatched, extra keys, wrong shapes, or part of the
    trunk or neck is missing.
    """
    from privreid.models.reid_net import is_classifier_key  # reid_net imports this module

    path = Path(path)
    state = _read_state_dict(path)
    file_keys = list(state)
    if not any(k.startswith("backbone.") for k in state):
        state = {f"backbone.{k}": v for k, v in state.items() if not k.startswith(_TRUNK_HEAD_PREFIXES)}
    target = model.state_dict()

    loadable: list[str] = []
    unexpected: list[str] = []
    mismatched: list[str] = []
    for key, value in state.items():
        fits = key in target and target[key].shape == value.shape
        if fits:
            loadable.append(key)
        elif is_classifier_key(key):
            continue  # a head for another label space
        elif key in target:
            mismatched.append(f"{key} {tuple(value.shape)} vs model {tuple(target[key].shape)}")
        else:
            unexpected.append(key)

    if not loadable:
        found = _listing(file_keys) or "no keys"
        raise ConfigError(f"weights file {path}: no key matches the model (file has {found})")
    if mismatched:
        raise ConfigError(f"weights file {path}: shape mismatch for {_listing(mismatched)}")
    if unexpected:
        raise ConfigError(f"weights file {path}: keys the model does not have: {_listing(unexpected)}")
    has_neck = any(k.startswith("neck.") for k in loadable)
    missing = [
        k
        for k in target
        if _required(k) and k not in state and (k.startswith("backbone.") or (has_neck and k.startswith("neck.")))
    ]
    if missing:
        raise ConfigError(f"weights file {path}: missing {_listing(missing)}")
    model.load_state_dict({k: state[k] for k in loadable}, strict=False)
    return loadable
