"""The models an evaluation command ranks with: privreid checkpoints and model files from elsewhere, side by side.

Each path of ``eval``, ``attack``, ``audit``, ``invert`` and ``compare`` is a privreid checkpoint (data, input
size, every client's model) or a file :func:`privreid.models.external.load_any_model` reads (at most its input
size and normalisation). An :class:`EvaluatedModel` holds either: :meth:`EvaluatedModel.network` (normalised
images in, features out, ``classifier`` when there is one); :meth:`EvaluatedModel.require` (a one-line refusal
when a command needs a checkpoint, gradients or a classifier the file lacks); :func:`data_source` (``--data``,
else the first checkpoint's; files from elsewhere alone need ``--data``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torch import nn

from privreid.checkpoint import Checkpoint, checkpoint_label, unique_labels
from privreid.config import DataConfig, RunConfig
from privreid.errors import ConfigError
from privreid.models.adapter import FEATURE_ONLY_ALTERNATIVES, ReIDAdapter
from privreid.models.external import as_adapter, model_file_kind
from privreid.models.external.files import read_torch_file
from privreid.models.external.privreid_files import CHECKPOINT, read_checkpoint

__all__ = ["DataSource", "EvaluatedModel", "data_source", "load_evaluated_models", "model_labels"]

#: the kind of a model handed over in Python (an adapter or ``nn.Module``, no file)
IN_MEMORY = "Python model"

#: what ``require`` can ask for, and how a refusal names it
NEEDS = {
    "checkpoint": "a privreid checkpoint (its run's clients, training data and shared update)",
    "gradients": "gradients through the model",
    "classifier": "an identity classifier",
}


@dataclass
class EvaluatedModel:
    """One model of an evaluation: ``checkpoint`` (a privreid run) or ``adapter`` (a file from elsewhere)."""

    path: Path
    checkpoint: Checkpoint | None = None
    adapter: ReIDAdapter | None = field(default=None, repr=False)

    @property
    def input_size(self) -> tuple[int, int]:
        """``(height, width)`` the model takes: the run's, or the file's (or the loader's stated default)."""
        if self.checkpoint is not None:
            data = self.checkpoint.run_config.data
            return data.height, data.width
        return self.adapter.height, self.adapter.width

    @property
    def kind(self) -> str:
        if self.checkpoint is not None:
            return "privreid checkpoint"
        return self.adapter.report.kind if self.adapter.report is not None else IN_MEMORY

    @property
    def a_kind(self) -> str:
        """The kind with its article: ``an ONNX``, ``a torchreid checkpoint``."""
        return f"{'an' if self.kind[:1].upper() in 'AEIOU' else 'a'} {self.kind}"

    @property
    def interpolation(self) -> str:
        """The test resize: the file's (or its convention's, :mod:`privreid.models.external.settings`);
        bilinear for a privreid checkpoint, as it trained."""
        return "bilinear" if self.checkpoint is not None else self.adapter.interpolation

    def has(self, need: str) -> bool:
        """Whether the model offers ``need`` (a key of :data:`NEEDS`)."""
        if self.checkpoint is not None:
            return True
        return {"checkpoint": False, "gradients": self.adapter.differentiable,
                "classifier": self.adapter.classifier is not None}[need]

    def require(self, need: str, command: str, instead: str = FEATURE_ONLY_ALTERNATIVES) -> None:
        """ConfigError, one line, when ``command`` needs ``need`` and this model has not got it."""
        if not self.has(need):
            raise ConfigError(f"{command} needs {NEEDS[need]}; {self.path} is {self.a_kind} without it "
                              f"({instead})")

    def network(self, client: str | None = None, *, device: Any = "cpu") -> nn.Module:
        """The module privreid's pipelines run (normalised ``(B, 3, H, W)`` -> features, eval mode); ``client``
        picks a checkpoint's personalised model (refused for a file from elsewhere)."""
        if self.checkpoint is not None:
            return self.checkpoint.load_model(client, device=device).eval()
        if client is not None:
            raise ConfigError(f"--client picks a personalised model of a privreid checkpoint; {self.path} is "
                              f"{self.a_kind}")
        return self.adapter.as_module().to(device).eval()

    def load_line(self) -> str | None:
        """What was loaded, mapped and ignored, in one line (files from elsewhere; ``None`` otherwise)."""
        return None if self.adapter is None or self.adapter.report is None else self.adapter.report.line()

    def provenance(self) -> dict[str, Any]:
        """JSON-ready record of what this model is, for a run's ``models.json``."""
        if self.checkpoint is not None:
            return {"path": str(self.path), "kind": self.kind, "method": self.checkpoint.method,
                    "round": self.checkpoint.round}
        if self.adapter.report is None:
            return {"path": str(self.path), "kind": self.kind, "module": type(self.adapter.model).__name__,
                    "settings": {"input": f"{self.adapter.height}x{self.adapter.width}",
                                 "mean": list(self.adapter.mean), "std": list(self.adapter.std),
                                 "test resize": self.adapter.interpolation}}
        return self.adapter.report.to_dict()


def load_evaluated_models(paths: list[Any], **file_options: Any) -> list[EvaluatedModel]:
    """Each path read once (:func:`~privreid.models.external.files.read_torch_file`) and told by its kind
    (:func:`~privreid.models.external.model_file_kind`): a privreid checkpoint as a :class:`Checkpoint`, any
    other model file as an adapter; an adapter or ``nn.Module`` (:func:`~privreid.models.external.as_adapter`)
    is taken as it is, named by its class and position (``ResNet #2``). ``file_options`` (``None`` dropped)
    apply to files from elsewhere only; with only checkpoints they are refused.
    """
    options = {k: v for k, v in file_options.items() if v is not None}
    models = []
    for position, path in enumerate(paths, 1):
        if isinstance(path, (ReIDAdapter, nn.Module)):
            adapter = as_adapter(path)
            models.append(EvaluatedModel(Path(f"{type(adapter.model).__name__} #{position}"), adapter=adapter))
            continue
        path = Path(path)
        obj = read_torch_file(path, what="a checkpoint")  # refusals as for a checkpoint: it is one by default
        kind = model_file_kind(path, obj)
        models.append(EvaluatedModel(path, checkpoint=read_checkpoint(path, obj)) if kind is CHECKPOINT
                      else EvaluatedModel(path, adapter=kind.load(path, obj, options)))
    if options and all(m.checkpoint is not None for m in models):
        flags = ", ".join("--" + k.replace("_", "-") for k in options)
        raise ConfigError(f"{flags} describe(s) model files from elsewhere; a privreid checkpoint records its "
                          "model and input size")
    return models


def model_labels(models: list[EvaluatedModel]) -> list[str]:
    """``method (run dir)`` for a checkpoint, ``file name (kind)`` otherwise; repeats made unique with ``#2`` ..."""
    return unique_labels([checkpoint_label(m.checkpoint) if m.checkpoint is not None
                          else f"{m.path.name} ({m.kind})" for m in models])


@dataclass
class DataSource:
    """Where the test data comes from: ``roots`` in ``format`` (``synth_seed`` for synthetic data), and
    ``config``, a run configuration whose data section describes them (the first privreid checkpoint's own,
    or the defaults' with ``--data``'s roots) for :func:`privreid.data.catalog.federation_for_config`."""

    roots: list[str]
    format: str
    synth_seed: int
    config: Any


def data_source(models: list[EvaluatedModel], data: list[str] | None) -> DataSource:
    """``--data`` when given, else the first privreid checkpoint's data; ConfigError when neither exists.

    With ``--data`` the seen / unseen split is the defaults' (``privreid train --data`` with no other flag).
    """
    first = next((m.checkpoint for m in models if m.checkpoint is not None), None)
    if not data:
        if first is None:
            raise ConfigError(f"{models[0].path} is {models[0].a_kind} file, not a privreid checkpoint: it records "
                              "no data, give --data")
        cfg = first.run_config
        return DataSource(list(cfg.data.roots), cfg.data.format, cfg.data.synth_seed, cfg)
    base = first.run_config if first is not None else RunConfig()
    seed = base.data.synth_seed
    cfg = replace(base, data=DataConfig(roots=[str(d) for d in data], synth_seed=seed))
    return DataSource(cfg.data.roots, "auto", seed, cfg)
