"""The adapter contract: what privreid needs from any ReID model, whoever trained it.

A :class:`ReIDAdapter` holds a module, how to get its retrieval features, its input size and normalisation,
and optionally its classifier. Every loader of :mod:`privreid.models.external` returns one, and so can user
code::

    net = torchvision.models.resnet50(weights="DEFAULT")
    adapter = ReIDAdapter(net, features="avgpool", height=256, width=128)
    privreid.evaluate(adapter, "synth")

:meth:`ReIDAdapter.features` takes ``[0, 1]`` RGB and applies the model's mean / std;
:meth:`ReIDAdapter.as_module` takes privreid's ImageNet-normalised input and undoes that first, so any adapter
runs wherever a ``ReIDModel`` runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD, INTERPOLATIONS
from privreid.errors import ConfigError

#: what the commands that need no classifier (and no gradients, for a non-differentiable model) offer instead
FEATURE_ONLY_ALTERNATIVES = "privreid eval, eval --corruption and attack need only features"


def _keys(keys: list[str], shown: int = 4) -> str:
    """``keys`` in a line: the first ``shown`` and how many more."""
    more = len(keys) - shown
    return ", ".join(keys[:shown]) + (f" (+{more} more)" if more > 0 else "")


@dataclass
class LoadReport:
    """What was loaded (``kind``, ``path``), mapped (``mapped``, ``mapping``) and ignored (key: why);
    ``settings``: where the input size, mean / std and feature came from."""

    kind: str
    path: str
    mapping: str
    mapped: int = 0
    ignored: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """One line: kind, path, mapped keys, ignored keys with the reason, input and feature settings."""
        parts = [f"loaded {self.kind} model {self.path}: {self.mapping}", f"{self.mapped} tensors mapped"]
        by_reason: dict[str, list[str]] = {}
        for key, reason in self.ignored.items():
            by_reason.setdefault(reason, []).append(key)
        parts += [f"ignored {_keys(keys)} ({reason})" for reason, keys in by_reason.items()]
        parts += [f"{name} {value}" for name, value in self.settings.items()]
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the run's provenance."""
        return asdict(self)


def _channels(values: Sequence[float]) -> torch.Tensor:
    return torch.tensor([float(v) for v in values], dtype=torch.float32).view(1, 3, 1, 1)


@dataclass
class ReIDAdapter:
    """A ReID model for privreid: ``model`` plus how to read its retrieval features.

    ``features``: ``None`` (the output), a callable ``normalised_images -> (B, D)``, or a submodule's name whose
    flattened output is read by a forward hook. ``height`` / ``width``: the input size; ``mean`` / ``std``: the
    ``[0, 1]`` pixels' normalisation; ``classifier``: reads the feature, or ``None``; ``interpolation``:
    ``bilinear`` (torchreid's, privreid's) or ``bicubic`` (fast-reid's); ``differentiable``: False for
    onnxruntime; ``report``: a loader's :class:`LoadReport`.
    """

    model: nn.Module
    features: Callable[[torch.Tensor], torch.Tensor] | str | None = None
    height: int = 256
    width: int = 128
    mean: Sequence[float] = IMAGENET_MEAN
    std: Sequence[float] = IMAGENET_STD
    classifier: nn.Module | None = None
    differentiable: bool = True
    interpolation: str = "bilinear"
    report: LoadReport | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ConfigError(f"mean and std need 3 values each, std positive; got mean={list(self.mean)}, "
                              f"std={list(self.std)}")
        if self.interpolation not in INTERPOLATIONS:
            raise ConfigError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {self.interpolation!r}")
        if self.height < 1 or self.width < 1:
            raise ConfigError(f"height and width must be positive, got {self.height}x{self.width}")
        if isinstance(self.features, str) and self.features not in dict(self.model.named_modules()):
            raise ConfigError(f"the model has no layer named {self.features!r} (features= takes a name from "
                              "model.named_modules())")

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        """``[0, 1]`` images -> the model's input, ``(images - mean) / std``."""
        return (images - _channels(self.mean).to(images)) / _channels(self.std).to(images)

    def features_of_normalised(self, x: torch.Tensor) -> torch.Tensor:
        """Retrieval features ``(B, D)`` of an already normalised batch ``x``."""
        if self.features is None:
            return self.model(x)
        if callable(self.features):
            return self.features(x)
        captured: list[torch.Tensor] = []
        layer = dict(self.model.named_modules())[self.features]
        handle = layer.register_forward_hook(lambda _module, _inputs, output: captured.append(output))
        try:
            self.model(x)
        finally:
            handle.remove()
        return torch.flatten(captured[-1], 1)

    def features_of(self, images: torch.Tensor) -> torch.Tensor:
        """Retrieval features ``(B, D)`` of ``images`` in ``[0, 1]``, ``(B, 3, height, width)``."""
        if tuple(images.shape[-2:]) != (self.height, self.width):
            raise ConfigError(f"the model takes {self.height}x{self.width} images, got "
                              f"{images.shape[-2]}x{images.shape[-1]}")
        return self.features_of_normalised(self.normalise(images))

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        """Identity logits of ``images`` in ``[0, 1]``: the classifier on the retrieval feature."""
        if self.classifier is None:
            raise ConfigError(f"this model has no identity classifier; {FEATURE_ONLY_ALTERNATIVES}")
        return self.classifier(self.features_of(images))

    def as_module(self) -> nn.Module:
        """An ``nn.Module`` from ImageNet-normalised images (privreid's pipeline) to this model's features."""
        return AdaptedModel(self)


class AdaptedModel(nn.Module):
    """:meth:`ReIDAdapter.as_module`: re-normalises privreid's input to the model's mean / std, returns features.

    ``model`` and ``classifier`` are submodules, so ``.eval()`` and ``.to()`` reach them.
    """

    def __init__(self, adapter: ReIDAdapter) -> None:
        super().__init__()
        self.adapter = adapter
        self.model = adapter.model
        self.classifier = adapter.classifier
        scale = _channels(IMAGENET_STD) / _channels(adapter.std)
        self.register_buffer("scale", scale, persistent=False)
        self.register_buffer("shift", (_channels(IMAGENET_MEAN) - _channels(adapter.mean)) / _channels(adapter.std),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Features of ``x``, normalised with ImageNet's mean / std (what privreid's test transform yields)."""
        return self.adapter.features_of_normalised(x * self.scale + self.shift)

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(feat, feat, logits)``, the shape of :meth:`privreid.models.ReIDModel.forward_train`, for the
        inversion threat models' client step: the classifier reads the retrieval feature (a model from
        elsewhere exposes no separate pre-neck feature)."""
        if self.classifier is None:
            raise ConfigError(f"this model has no identity classifier; {FEATURE_ONLY_ALTERNATIVES}")
        feat = self(x)
        return feat, feat, self.classifier(feat)
