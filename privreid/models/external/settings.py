"""Input size and normalisation of a loaded model: from the file where it records them, else from the
caller's arguments, else from the named convention's defaults (256x128, ImageNet mean / std for torchreid,
fast-reid and torchvision alike); the report says which."""

from __future__ import annotations

from typing import Any

from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD

#: the input size torchreid (``ImageDataManager``) and fast-reid (``INPUT.SIZE_TEST``) test at
DEFAULT_HEIGHT, DEFAULT_WIDTH = 256, 128


def input_settings(recorded: dict[str, Any] | None, options: dict[str, Any], convention: str) -> dict[str, Any]:
    """``height``, ``width``, ``mean``, ``std`` for :class:`~privreid.models.adapter.ReIDAdapter`, and
    ``settings`` for the report: each value from the file (``recorded``), else ``options``, else ``convention``."""
    recorded = recorded or {}
    defaults = {"height": DEFAULT_HEIGHT, "width": DEFAULT_WIDTH, "mean": list(IMAGENET_MEAN),
                "std": list(IMAGENET_STD)}
    out: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, default in defaults.items():
        if recorded.get(name) is not None:
            out[name], sources[name] = recorded[name], "file"
        elif options.get(name) is not None:
            out[name], sources[name] = options[name], "argument"
        else:
            out[name], sources[name] = default, f"{convention} default"
    size = f"{out['height']}x{out['width']} ({sources['height']})"
    norm = ("ImageNet" if list(map(float, out["mean"])) == list(IMAGENET_MEAN)
            and list(map(float, out["std"])) == list(IMAGENET_STD) else f"{list(out['mean'])}/{list(out['std'])}")
    out["settings"] = {"input": size, "mean/std": f"{norm} ({sources['mean']})"}
    return out
