"""privreid's own files: a training checkpoint (``privreid-ckpt-v1``) and ``export --format state-dict``, both
rebuilt strictly as a :class:`~privreid.models.ReIDModel`; the export records its input size and mean / std, a
checkpoint the run's input size (ImageNet mean / std)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privreid.checkpoint import FORMAT, Checkpoint, check_checkpoint
from privreid.errors import CheckpointError
from privreid.models.adapter import LoadReport, ReIDAdapter
from privreid.models.external.files import ModelFile
from privreid.models.external.settings import adapter_of, input_settings

STATE_DICT_FORMAT = "privreid-state-dict-v1"


def _adapter(model, path: Path, kind: str, recorded: dict[str, Any], options: dict[str, Any]) -> ReIDAdapter:
    model.eval()
    report = LoadReport(kind, str(path), "privreid's own layout, loaded strictly", len(model.state_dict()))
    return adapter_of(model, input_settings(recorded, options, "privreid"), report,
                      "the neck output (ReIDModel.forward)", "yes" if model.classifier is not None else "none",
                      classifier=model.classifier)


def _load_export(path: Path, obj: dict[str, Any], options: dict[str, Any]) -> ReIDAdapter:
    from privreid.models import build_from_config

    try:
        model = build_from_config(obj["model_config"])
        model.load_state_dict(obj["state_dict"], strict=True)
    except (RuntimeError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: a privreid state-dict export whose weights do not fit its model_config "
                              f"({type(exc).__name__})") from None
    return _adapter(model, path, "privreid state-dict export", obj.get("input") or {}, options)


def read_checkpoint(path: Path, obj: dict[str, Any]):
    """The :class:`~privreid.checkpoint.Checkpoint` ``obj`` (a privreid checkpoint read from ``path`` by
    :func:`~.files.read_torch_file`), validated as :meth:`Checkpoint.load` validates, without reading it again."""
    return Checkpoint.from_dict(check_checkpoint(obj, path), path=path)


def _load_checkpoint(path: Path, obj: dict[str, Any], options: dict[str, Any]) -> ReIDAdapter:
    ckpt = read_checkpoint(path, obj)
    model = ckpt.load_model(options.get("client"))
    data = ckpt.run_config.data
    return _adapter(model, path, f"privreid checkpoint ({ckpt.method}, round {ckpt.round})",
                    {"height": data.height, "width": data.width}, options)


def _format(obj: Any) -> Any:
    return obj.get("format") if isinstance(obj, dict) else None


#: a privreid training checkpoint: :mod:`privreid.models.evaluated` reads it as a :class:`Checkpoint`
CHECKPOINT = ModelFile("privreid-checkpoint", f"a privreid training checkpoint ({FORMAT})",
                       lambda path, obj: _format(obj) == FORMAT, _load_checkpoint)
KINDS = [
    CHECKPOINT,
    ModelFile("privreid-state-dict", "privreid export --format state-dict",
              lambda path, obj: _format(obj) == STATE_DICT_FORMAT, _load_export),
]
