"""Top-level Python functions that take any ReID model (an adapter, an ``nn.Module`` or a model file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from privreid.data.types import TestSet
from privreid.evaluation.model_eval import SUMMARY_KEYS, evaluate_model
from privreid.models.adapter import as_adapter


@dataclass
class EvaluationResult:
    """:func:`evaluate`'s numbers: per test set name, rank-1/5/10, mAP, mINP (fractions) and the full record."""

    testsets: dict[str, dict[str, float]]
    records: dict[str, dict[str, Any]] = field(repr=False)
    model: dict[str, Any] | None = None  #: the model file's load report (``LoadReport.to_dict``), if any

    def to_dict(self) -> dict[str, Any]:
        return {"testsets": self.testsets, "records": self.records, "model": self.model}


def _testsets(data: Any) -> list[TestSet]:
    """``data`` as test sets: a TestSet, a list of them, or a ``--data`` value (a root, ``synth`` ...)."""
    if isinstance(data, TestSet):
        return [data]
    if isinstance(data, (list, tuple)) and all(isinstance(t, TestSet) for t in data):
        return list(data)
    from privreid.data.catalog import resolve_datasets
    from privreid.data.partition import as_test_set

    return [as_test_set(name, ds) for name, ds in resolve_datasets([str(data)]).items()]


def evaluate(model: Any, data: Any = "synth", *, height: int | None = None, width: int | None = None,
             batch_size: int = 128, device: str = "cpu", progress: bool = False,
             **load_options: Any) -> EvaluationResult:
    """Score ``model`` on every test set of ``data`` with :func:`~privreid.evaluation.model_eval.evaluate_model`.

    ``model``: a :class:`~privreid.models.adapter.ReIDAdapter`, an ``nn.Module``
    (its output is the feature) or a model file
    (:func:`~privreid.models.external.load_any_model`; ``load_options`` go
    there).  ``height`` / ``width`` override the adapter's input size.  Quiet
    unless ``progress``.
    """
    adapter = as_adapter(model, **load_options)
    height, width = height or adapter.height, width or adapter.width
    module = adapter.as_module().to(device)
    records = {ts.name: evaluate_model(module, ts, height=height, width=width, batch_size=batch_size,
                                       device=device, progress=progress) for ts in _testsets(data)}
    return EvaluationResult({name: {k: r[k] for k in SUMMARY_KEYS} for name, r in records.items()}, records,
                            adapter.report.to_dict() if adapter.report else None)
