"""TorchScript files (``torch.jit.save``): the module's output is the retrieval feature.

Trust: an archive holds TorchScript code, which cannot import, open files or call Python (but the graph may
compute anything torch operators do; privreid never loads custom operator libraries), and pickles that
``torch.jit.load`` unpickles. Every embedded pickle is scanned first
(:func:`privreid.pickle_scan.archive_globals`): a global other than torch's and ``__torch__.*`` is refused.
Input size and mean / std come from the arguments (torchreid's 256x128 ImageNet default); no classifier.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from privreid.errors import CheckpointError
from privreid.models.adapter import LoadReport, ReIDAdapter
from privreid.models.external.files import ModelFile, is_torchscript_archive, was_read
from privreid.models.external.settings import adapter_of, input_settings
from privreid.pickle_scan import SAFE_PREFIXES, archive_globals

#: globals a TorchScript archive's pickles hold legitimately: torch's, and its own compiled classes
TORCHSCRIPT_PREFIXES = (*SAFE_PREFIXES, "__torch__.")


def _detect(path: Path, obj: Any) -> bool:
    return not was_read(obj) and is_torchscript_archive(path)


def _load(path: Path, obj: Any, options: dict[str, Any]) -> ReIDAdapter:
    unsafe = next((g for g in archive_globals(path) if not g.startswith(TORCHSCRIPT_PREFIXES)), None)
    if unsafe is not None:
        raise CheckpointError(f"refusing to load {path}: its pickles name the global {unsafe}, which a "
                              "TorchScript model never holds (nothing was executed)")
    try:
        with warnings.catch_warnings():  # torch's deprecation notice for torch.jit; the library stays quiet
            warnings.simplefilter("ignore", FutureWarning)
            module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - a damaged archive or an unknown operator
        raise CheckpointError(f"{path} is a TorchScript archive torch cannot load ({type(exc).__name__})") from None
    report = LoadReport("TorchScript", str(path), "the scripted module as is", len(module.state_dict()))
    return adapter_of(module.eval(), input_settings(None, options, "torchreid"), report, "the module's output")


KINDS = [ModelFile("torchscript", "a TorchScript file (torch.jit.save)", _detect, _load)]
