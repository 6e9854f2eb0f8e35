"""Numeric precision of a model's forward and backward passes (``--precision fp32|bf16|fp16``).

``fp32`` is the default.  ``bf16`` and ``fp16`` run the model under :func:`torch.autocast` on its device: convolutions
and matrix products in the 16-bit type, the reductions and losses autocast keeps in fp32; weights, optimiser state and
the features that leave :func:`privreid.evaluation.features.extract_features` stay fp32.  ``fp16`` also scales the
loss (:class:`torch.amp.GradScaler`) so small gradients do not flush to zero; ``bf16`` has fp32's exponent range and
needs no scaler.

Where a path cannot run in 16 bits it says so in one line:

* DP-SGD (Opacus 1.6) supports autocast in its hooks grad-sample mode, which privreid uses, but not a gradient
  scaler: Opacus clips each per-sample gradient to ``max_grad_norm`` before the optimiser step, so the clipping would
  act on the scaled gradients.  DP-SGD takes ``bf16`` and refuses ``fp16`` (:meth:`privreid.config.RunConfig.validate`).
* Model inversion optimises images through many small gradient steps of a feature-matching objective; it runs in fp32
  whatever ``--precision`` says (:data:`INVERSION_NOTE`).
* CPU autocast of torch >= 2.4 takes both 16-bit types, but only processors with native bf16 (AVX512-BF16 or AMX) run
  it faster than fp32 (:func:`cpu_bf16_native`; ``benchmarks/precision.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from privreid.errors import ConfigError

#: the torch type of each of :data:`privreid.config.PRECISIONS` (the keys)
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

#: the line ``privreid invert`` prints, and records, when ``--precision`` is not fp32
INVERSION_NOTE = ("model inversion runs in fp32 whatever --precision says: its feature-matching objective "
                  "takes many small image-gradient steps that 16-bit products would round away")


def check_precision(precision: str, device: torch.device | str | None = None) -> None:
    """Refuse an unknown precision and a 16-bit type the device's autocast lacks, in one line (fp16 with DP-SGD:
    :meth:`privreid.config.RunConfig.validate`)."""
    if precision not in DTYPES:
        raise ConfigError(f"precision must be one of {', '.join(DTYPES)} (got {precision!r})")
    if device is not None and precision != "fp32":
        kind = torch.device(device).type
        if not torch.amp.is_autocast_available(kind):
            raise ConfigError(f"--precision {precision} needs autocast, which torch {torch.__version__} lacks on "
                              f"{kind}; use --precision fp32")


def autocast(precision: str, device: torch.device | str) -> contextlib.AbstractContextManager:
    """The context a forward pass runs in: nothing for fp32, :func:`torch.autocast` to the 16-bit type else."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=DTYPES[precision])


class Autocast(torch.nn.Module):
    """``model`` run under :func:`autocast`, its output cast back to fp32.

    Evaluation and the attacks wrap their model in it rather than running in
    an autocast block, so that only the model's own products are 16-bit: the
    distance matrix and the ranking (:mod:`privreid.evaluation.metrics`) stay
    fp32.  ``train()`` / ``eval()`` reach ``model`` as a submodule's do.
    """

    def __init__(self, model: torch.nn.Module, precision: str, device: torch.device | str):
        super().__init__()
        self.model, self.precision, self.device_type = model, precision, torch.device(device).type

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device_type, dtype=DTYPES[self.precision]):
            out = self.model(images)
        return out.float() if isinstance(out, torch.Tensor) else out


def at_precision(model: torch.nn.Module, precision: str, device: torch.device | str) -> torch.nn.Module:
    """``model`` itself for fp32, else :class:`Autocast` of it."""
    return model if precision == "fp32" else Autocast(model, precision, device)


def grad_scaler(precision: str, device: torch.device | str) -> torch.amp.GradScaler:
    """A loss scaler, enabled for fp16 only (a disabled one passes ``scale``, ``step`` and ``update`` through)."""
    return torch.amp.GradScaler(torch.device(device).type, enabled=precision == "fp16")


def cpu_bf16_native() -> bool:
    """Whether this processor computes bf16 natively (AVX512-BF16 or AMX), where CPU bf16 can beat fp32."""
    return bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
                or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


@contextlib.contextmanager
def cuda_speedups(device: torch.device | str, enabled: bool = True) -> Iterator[None]:
    """On CUDA (and ``enabled``: ``--set runtime.cudnn_benchmark=false`` turns it off), let cuDNN pick the fastest
    convolution algorithms for the (fixed) input size during the block; elsewhere nothing.  The picked algorithms
    may differ from run to run, so CUDA runs are not bit-reproducible (they were not before either: cuDNN's default
    algorithms are not deterministic)."""
    if torch.device(device).type != "cuda" or not enabled:
        yield
        return
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def to_device(images: torch.Tensor, device: torch.device | str,
              augment: Callable[[torch.Tensor], torch.Tensor] | None = None, *,
              channels_last: bool = True) -> torch.Tensor:
    """A training batch on ``device``, augmented there by ``augment`` if given.

    ``augment`` is what the batch still needs (:meth:`privreid.data.ImageDataset.augmentation`: the ``uint8``
    decoded images cross to the device, 4x fewer bytes than float, and become the float training images there;
    an empty batch, a Poisson batch of DP-SGD, is already final).  On CUDA the copy does not block (from pinned
    memory) and, with ``channels_last`` (``runtime.channels_last``), the batch is channels-last (NHWC), the layout
    tensor-core convolutions run fastest (the weights keep their layout, so state dicts, checkpoints and
    aggregation are unchanged).  Elsewhere a plain ``images.to(device)``: CPU results are unchanged."""
    cuda = torch.device(device).type == "cuda"
    images = images.to(device, non_blocking=cuda)
    if augment is not None and len(images):
        images = augment(images)
    return images.contiguous(memory_format=torch.channels_last) if cuda and channels_last else images
