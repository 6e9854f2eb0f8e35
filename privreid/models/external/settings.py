"""Input size, normalisation and test resize of a loaded model: from the file where it records them, else
from the caller's arguments, else from the named convention's defaults (256x128, ImageNet mean / std for
torchreid, fast-reid and torchvision alike; torchreid resizes bilinearly, fast-reid bicubically); the report
says which, and which metric the source project ranks with (:data:`CONVENTIONS`)."""

from __future__ import annotations

from typing import Any

from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD, INTERPOLATIONS
from privreid.errors import ConfigError
from privreid.models.adapter import ReIDAdapter

#: the input size torchreid (``ImageDataManager``) and fast-reid (``INPUT.SIZE_TEST``) test at
DEFAULT_HEIGHT, DEFAULT_WIDTH = 256, 128

#: per convention: the test resize and the metric its own evaluator ranks with, and where that is set.
#: torchreid: ``T.Resize`` (bilinear) and ``Engine.test(dist_metric="euclidean")``; fast-reid:
#: ``T.Resize(..., interpolation=3)`` (bicubic) and ``TEST.METRIC: cosine``.
CONVENTIONS: dict[str, dict[str, str]] = {
    "torchreid": {"interpolation": "bilinear", "metric": "euclidean (torchreid's Engine.test dist_metric)"},
    "fast-reid": {"interpolation": "bicubic", "metric": "cosine (fast-reid's TEST.METRIC)"},
}
#: what a model of no ReID convention (torchvision, TorchScript, ONNX, privreid's own) is taken with
_PRIVREID = {"interpolation": "bilinear", "metric": "euclidean (privreid's default)"}
#: the conventions whose files never record their input size
_SIZE_NOT_RECORDED = {"torchreid", "fast-reid", "torchvision"}


def input_settings(recorded: dict[str, Any] | None, options: dict[str, Any], convention: str) -> dict[str, Any]:
    """``height``, ``width``, ``mean``, ``std`` for :class:`~privreid.models.adapter.ReIDAdapter`, and
    ``settings`` for the report: each value from the file (``recorded``), else ``options``, else ``convention``."""
    recorded = recorded or {}
    convention_of = CONVENTIONS.get(convention, _PRIVREID)
    defaults = {"height": DEFAULT_HEIGHT, "width": DEFAULT_WIDTH, "mean": list(IMAGENET_MEAN),
                "std": list(IMAGENET_STD), "interpolation": convention_of["interpolation"]}
    out: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, default in defaults.items():
        if recorded.get(name) is not None:
            out[name], sources[name] = recorded[name], "file"
        elif options.get(name) is not None:
            out[name], sources[name] = options[name], "argument"
        else:
            out[name], sources[name] = default, f"{convention} default"
    if out["interpolation"] not in INTERPOLATIONS:
        raise ConfigError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {out['interpolation']!r}")
    unrecorded = "; the file does not record it" if sources["height"].endswith(" default") and \
        convention in _SIZE_NOT_RECORDED else ""
    size = f"{out['height']}x{out['width']} ({sources['height']}{unrecorded})"
    norm = ("ImageNet" if list(map(float, out["mean"])) == list(IMAGENET_MEAN)
            and list(map(float, out["std"])) == list(IMAGENET_STD) else f"{list(out['mean'])}/{list(out['std'])}")
    out["settings"] = {"input": size, "mean/std": f"{norm} ({sources['mean']})",
                       "test resize": f"{out['interpolation']} ({sources['interpolation']})",
                       "source metric": convention_of["metric"]}
    return out


def adapter_of(model: Any, given: dict[str, Any], report: Any, feature: str, classifier_line: str = "none",
               **kwargs: Any) -> ReIDAdapter:
    """The :class:`~privreid.models.adapter.ReIDAdapter` of ``model`` with :func:`input_settings`' ``given``
    values and the loader's ``report``, whose settings become ``given``'s, the ``feature`` read and the
    ``classifier_line`` (``kwargs``: ``classifier``, ``differentiable``)."""
    report.settings = {**given["settings"], "feature": feature, "classifier": classifier_line}
    return ReIDAdapter(model, None, given["height"], given["width"], given["mean"], given["std"],
                       interpolation=given["interpolation"], report=report, **kwargs)
