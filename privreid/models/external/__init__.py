"""Loading ReID models privreid did not train: one function, :func:`load_any_model`, for every file kind.

Each kind (:data:`MODEL_FILES`, one module each) detects its files and loads them into a
:class:`~privreid.models.adapter.ReIDAdapter` with a :class:`~privreid.models.adapter.LoadReport`. A file is
read once (:func:`~.files.read_torch_file`) and its kind told from what it holds (:func:`model_file_kind`);
TorchScript archives are scanned before ``torch.jit.load`` (:mod:`.torchscript_files`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from privreid.errors import CheckpointError
from privreid.models.adapter import ReIDAdapter
from privreid.models.external import (
    fastreid_files,
    onnx_files,
    privreid_files,
    torchreid_files,
    torchscript_files,
)
from privreid.models.external.files import ModelFile, read_torch_file

__all__ = ["MODEL_FILES", "ModelFile", "as_adapter", "load_any_model", "model_file_kind"]

#: every kind, in detection order (the first whose ``detect`` accepts a file loads it)
MODEL_FILES: list[ModelFile] = [*privreid_files.KINDS, *torchreid_files.KINDS, *fastreid_files.KINDS,
                                *torchscript_files.KINDS, *onnx_files.KINDS]


def model_file_kind(path: str | os.PathLike, obj: Any) -> ModelFile:
    """The kind of ``path`` (``obj``: what :func:`read_torch_file` read); CheckpointError naming the accepted kinds."""
    for kind in MODEL_FILES:
        if kind.detect(Path(path), obj):
            return kind
    raise CheckpointError(f"{path} is not a model file privreid reads (accepted: "
                          f"{', '.join(kind.name for kind in MODEL_FILES)})")


def load_any_model(path: str | os.PathLike, *, arch: str | None = None, height: int | None = None,
                   width: int | None = None, mean: list[float] | None = None, std: list[float] | None = None,
                   last_stride: int | None = None, client: str | None = None,
                   interpolation: str | None = None) -> ReIDAdapter:
    """Load the model in ``path``, whatever its kind, as a :class:`ReIDAdapter` on the CPU in eval mode.

    ``arch``: a torchreid file's architecture (any ``torchreid.models`` name with ``privreid[torchreid]``, else
    ``resnet18/34/50``), checked against a ResNet file's keys. ``height``, ``width``, ``mean``, ``std``,
    ``interpolation`` apply where the file records none (defaults: 256x128, ImageNet, the source project's
    resize: fast-reid's bicubic, else bilinear); ``last_stride`` likewise (defaults: torchreid and torchvision
    2, fast-reid 1); ``client``: a checkpoint's personalised model. ``adapter.report`` says what was loaded,
    mapped, ignored and set. CheckpointError (one line): a missing, unsafe or unrecognised file, or weights
    that do not map.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"model file not found: {path}")
    obj = read_torch_file(path)
    options = dict(arch=arch, height=height, width=width, mean=mean, std=std, last_stride=last_stride,
                   client=client, interpolation=interpolation)
    return model_file_kind(path, obj).load(path, obj, options)


def as_adapter(model: Any, **load_options: Any) -> ReIDAdapter:
    """``model`` as an adapter: an adapter as is, an ``nn.Module`` with defaults (its output is the feature,
    256x128 ImageNet input, a ``classifier`` attribute if it has one), a path through
    :func:`load_any_model` (``load_options`` are its keyword arguments)."""
    if isinstance(model, ReIDAdapter):
        return model
    if isinstance(model, nn.Module):
        classifier = getattr(model, "classifier", None)
        return ReIDAdapter(model, classifier=classifier if isinstance(classifier, nn.Module) else None,
                           **load_options)
    return load_any_model(model, **load_options)
