"""Feature extraction for ReID evaluation."""

from __future__ import annotations

import numpy as np
import torch

from privreid.errors import ConfigError, DataError

__all__ = ["extract_features"]


def extract_features(model: torch.nn.Module, loader, device="cpu", flip: bool = False,
                     *, progress: bool = False):
    """Run ``model`` over ``loader`` and collect features and labels.

    Args:
        model: maps an image batch ``(B, C, H, W)`` to a ``(B, D)`` feature tensor; already on ``device``.  It runs
            in eval mode under ``torch.no_grad()``; its train/eval mode is restored afterwards (also on error).
        loader: iterable of ``(images, pids, camids)`` batches; ``pids`` and ``camids`` may be tensors, arrays or
            lists of ints.
        device: where the images are moved before calling the model.
        flip: each feature is the average of the image's and its horizontal flip's (along the last, width, dim).
        progress: show a progress bar (on a terminal only, :func:`privreid.log.progress_bar`).

    Returns:
        ``(feats, pids, camids)``: an ``(N, D)`` float32 tensor on the CPU and two int64 numpy arrays of length ``N``.

    Raises:
        DataError: the loader yields no batch, or a batch is not a ``(images, pids, camids)`` triple with matching
            lengths.
        ConfigError: the model does not return a ``(B, D)`` tensor.
    """
    from privreid.log import progress_bar

    batches = progress_bar(loader, desc="extracting features", unit="batch", enabled=progress)
    was_training = model.training
    model.eval()
    feats, pids, camids = [], [], []
    try:
        with torch.no_grad():
            for batch in batches:
                if not isinstance(batch, (tuple, list)) or len(batch) != 3:
                    raise DataError("each loader batch must be an (images, pids, camids) triple")
                images, batch_pids, batch_camids = batch
                images = images.to(device, non_blocking=True)  # from pinned or pageable memory: no wait on the device
                f = _features(model, images)
                if flip:
                    f = (f + _features(model, images.flip(-1))) / 2
                batch_pids = _labels(batch_pids)
                batch_camids = _labels(batch_camids)
                if not len(f) == len(batch_pids) == len(batch_camids):
                    raise DataError(
                        f"batch has {len(f)} images but {len(batch_pids)} pids and "
                        f"{len(batch_camids)} camids")
                feats.append(f.detach())  # kept on the device: one copy to the host at the end, no sync per batch
                pids.append(batch_pids)
                camids.append(batch_camids)
    finally:
        model.train(was_training)
    if not feats:
        raise DataError("the loader yielded no batches; nothing to extract")
    return torch.cat(feats).to(device="cpu", dtype=torch.float32), np.concatenate(pids), np.concatenate(camids)


def _features(model: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    f = model(images)
    if not isinstance(f, torch.Tensor) or f.ndim != 2 or len(f) != len(images):
        shape = tuple(f.shape) if isinstance(f, torch.Tensor) else type(f).__name__
        raise ConfigError(
            f"model(images) must return a (B, D) feature tensor for B={len(images)} "
            f"images, got {shape}")
    return f


def _labels(x) -> np.ndarray:
    a = x.numpy(force=True) if isinstance(x, torch.Tensor) else np.asarray(x)
    return a.reshape(-1).astype(np.int64)
