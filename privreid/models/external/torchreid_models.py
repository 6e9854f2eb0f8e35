"""torchreid's own architectures, built by torchreid (``privreid[torchreid]``) for its checkpoints.

The model is built by ``torchreid.reid.models`` (OSNet, MLFN, HACNN, PCB, DenseNet, ResNets ...), loaded
strictly, its eval-mode output the feature. The name: ``--arch`` (:data:`TORCHREID_ARCHS`), a ResNet's keys, or
the model whose weights have the file's names and shapes (:func:`infer_torchreid_name`; unique for torchreid
0.2.5, tests/test_foreign_files.py). ResNets are built from ``ResNet`` with the file's ``fc`` dims and a last
stride (the file's record, ``last_stride``, else the factory's: 2; ``resnet50_fc512``: 1), since
``build_model('resnet18')`` has no ``fc`` block and would not take privreid's export.
"""

from __future__ import annotations

import importlib.util
import warnings
import torch
from torch import nn

from privreid.errors import CheckpointError, ConfigError
from privreid.model_names import TORCHREID_ARCHS

#: what to install for the architectures privreid does not map itself
TORCHREID_EXTRA = "pip install 'privreid[torchreid]'"

#: torchreid's ResNets built from its ``ResNet`` class: block, blocks per stage, default last stride
_RESNETS = {
    "resnet18": ("BasicBlock", (2, 2, 2, 2), 2),
    "resnet34": ("BasicBlock", (3, 4, 6, 3), 2),
    "resnet50": ("Bottleneck", (3, 4, 6, 3), 2),
    "resnet101": ("Bottleneck", (3, 4, 23, 3), 2),
    "resnet152": ("Bottleneck", (3, 8, 36, 3), 2),
    "resnet50_fc512": ("Bottleneck", (3, 4, 6, 3), 1),
}


def torchreid_installed() -> bool:
    """Whether torchreid can be imported (without importing it)."""
    return importlib.util.find_spec("torchreid") is not None


def _models():
    """``torchreid.reid.models`` (PyPI's torchreid 0.2.5 nests the package under ``reid``)."""
    with warnings.catch_warnings():  # its Cython-evaluation notice and its dependencies' deprecations
        warnings.simplefilter("ignore")
        try:
            from torchreid.reid import models
        except ModuleNotFoundError as exc:
            raise CheckpointError(f"torchreid is installed but cannot be imported (it needs {exc.name}): "
                                  f"{TORCHREID_EXTRA}") from None
    return models


def torchreid_version() -> str:
    from importlib.metadata import version

    return version("torchreid")


def resnet_name(state: dict[str, torch.Tensor]) -> str | None:
    """The torchreid ResNet whose block type and stage depths match ``state``'s trunk keys, else ``None``."""
    bottleneck = any(k.endswith(".conv3.weight") for k in state if k.startswith("layer"))
    depths = tuple(len({k.split(".")[1] for k in state if k.startswith(f"layer{i}.")}) for i in range(1, 5))
    for name, (block, layers, _) in _RESNETS.items():
        if (block == "Bottleneck") == bottleneck and layers == depths and "conv1.weight" in state:
            return name
    return None


def _signature(state: dict[str, torch.Tensor]) -> frozenset:
    """The names and shapes of ``state``'s tensors, a classifier's shape aside (its width is the identity count)."""
    return frozenset((k, None if k.startswith("classifier") else tuple(v.shape)) for k, v in state.items())


def infer_torchreid_name(state: dict[str, torch.Tensor]) -> str | None:
    """The torchreid model whose weights have exactly ``state``'s names and shapes (classifier width aside),
    else ``None``.  Each candidate is built on the ``meta`` device (no memory, no initialisation), OSNets first;
    all of them take a few seconds."""
    models = _models()
    want = _signature(state)
    for name in sorted(TORCHREID_ARCHS, key=lambda n: (not n.startswith("osnet"), n)):
        try:
            with warnings.catch_warnings(), torch.device("meta"):
                warnings.simplefilter("ignore")
                candidate = models.build_model(name, _classes(state), loss="softmax", pretrained=False,
                                               use_gpu=False)
        except Exception:  # noqa: BLE001 - a model that cannot be built on the meta device is not this one
            continue
        if _signature(candidate.state_dict()) == want:
            return name
    return None


def _fc_dims(state: dict[str, torch.Tensor]) -> list[int] | None:
    """The widths of torchreid's ``fc`` block (its Linear layers, ``fc.<i>.weight`` of 2 dims), ``None`` if none."""
    dims = [(int(k.split(".")[1]), v.shape[0]) for k, v in state.items()
            if k.startswith("fc.") and k.endswith(".weight") and v.dim() == 2]
    return [d for _, d in sorted(dims)] or None


def _classes(state: dict[str, torch.Tensor]) -> int:
    """The identity count of the classifier in ``state`` (the first 2-d ``*classifier*`` weight), else 1."""
    return next((v.shape[0] for k, v in state.items() if "classifier" in k and k.endswith("weight") and v.dim() == 2), 1)


def build_torchreid_model(name: str, state: dict[str, torch.Tensor], path: str, *,
                          last_stride: int | None) -> tuple[nn.Module, nn.Module | None, str]:
    """torchreid's ``name`` holding ``state`` (strictly; a file without a classifier, such as privreid's export
    of a model that has none, may lack ``classifier.*``), in eval mode; its identity classifier, taken out of
    the model (:func:`_split_classifier`); and how it was built (for the report)."""
    if name not in TORCHREID_ARCHS:
        raise ConfigError(f"{name!r} is not one of torchreid's models ({', '.join(TORCHREID_ARCHS)})")
    models = _models()
    classes = _classes(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in _RESNETS:
            from torchreid.reid.models import resnet

            block, layers, default_stride = _RESNETS[name]
            stride = last_stride or default_stride
            fc_dims = _fc_dims(state)
            model = resnet.ResNet(num_classes=classes, loss="softmax", block=getattr(resnet, block),
                                  layers=list(layers), last_stride=stride, fc_dims=fc_dims, dropout_p=None)
            how = (f"torchreid's ResNet ({name}: last stride {stride}"
                   f"{'' if last_stride else ' (torchreid default; no weight records it)'}, fc_dims {fc_dims})")
        else:
            if last_stride is not None:
                raise ConfigError(f"a last stride applies to torchreid's ResNets, not to {name}")
            model = models.build_model(name, classes, loss="softmax", pretrained=False, use_gpu=False)
            how = f"torchreid's {name}"
    has_classifier = any(k.startswith("classifier.") for k in state)
    try:
        missing, unexpected = model.load_state_dict(state, strict=has_classifier)
        missing = [k for k in missing if not k.startswith("classifier.")]
        if missing or unexpected:
            raise RuntimeError(f"Error(s) in loading state_dict:\n{'Missing' if missing else 'Unexpected'} key(s) "
                               f"in state_dict: {', '.join(missing or unexpected)}")
    except RuntimeError as exc:
        lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
        raise CheckpointError(f"{path}: the weights do not fit torchreid's {name} "
                              f"({lines[1] if len(lines) > 1 else lines[0]})"[:400]) from None
    classifier = _split_classifier(model, has_classifier)
    return model.eval(), classifier, f"built by torchreid {torchreid_version()} as {how}"


def _split_classifier(model: nn.Module, loaded: bool) -> nn.Module | None:
    """The model's identity classifier when it is one ``nn.Linear`` reading the eval feature (torchreid's
    ResNets, OSNets, DenseNets, MLFN ...) and the file held it, else ``None`` (part-based heads: PCB, HACNN).
    A Linear classifier is replaced in the model by ``nn.Identity``, so the model returns the feature in
    training mode too (torchreid's models return logits there) and holds the classifier's parameters once."""
    classifier = getattr(model, "classifier", None)
    if not isinstance(classifier, nn.Linear):
        return None
    model.classifier = nn.Identity()
    return classifier if loaded else None
