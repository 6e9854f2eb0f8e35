"""``--compile``: :func:`torch.compile` of the model's forward and of the identity loss (off by default).

What is compiled, always in place (:meth:`torch.nn.Module.compile`: the module's ``__call__`` runs the compiled
graph, the module itself, its parameters and its ``state_dict`` keys stay as they are, so a compiled run's
checkpoint is an eager one, key for key, and a deep copy of a compiled module is an eager module):

* ``privreid train``: the trunk of the resident model (``model.backbone`` and ``model.neck``) and the identity
  loss of the client update (:class:`privreid.federated.client.SupervisedUpdate`); the classifier, replaced for
  every client (a fresh head of the client's identity count), stays eager, as would any other module whose
  replacement would recompile the graph.  The run's evaluations go through the same compiled trunk.  A model
  with a part branch (FedARKS) reaches its backbone through ``feature_map``, which stays eager: there only the
  neck and the loss are compiled.
* ``privreid eval`` and ``privreid attack``: the evaluated network's forward (the attacks differentiate through
  it).

Compiling happens at a module's first call and again for each new input signature (train and eval mode, a
smaller last batch; :mod:`torch._dynamo` recompiles with dynamic shapes after the first change).  The numbers
are the eager model's up to floating-point reassociation in the fused kernels (features agree to about 1e-5;
reference numbers are eager).  :class:`CompileClock` measures the seconds spent compiling.

Refused in one line where it cannot apply: with DP-SGD (Opacus's per-sample gradient hooks,
:meth:`privreid.config.RunConfig.validate`), with ``--parallel-clients``
(:func:`privreid.training.check_compile_run`), on a CPU without a C++ compiler or a GPU without Triton (the
inductor backend generates and compiles kernels: :func:`check_compile`), and for a model that is no torch
module graph (TorchScript, ONNX: :func:`compile_if`).
"""

from __future__ import annotations

import shutil

import torch

from privreid.errors import ConfigError

#: dynamo's time metrics that together are a compile's wall time: tracing and compiling the forward (and the
#: backward compiled with it), and the backward compiled lazily at its first call
_COMPILE_METRICS = ("_compile.compile_inner", "backward._backward_impl")


def check_compile(device: torch.device | str) -> None:
    """Refuse ``--compile`` where the inductor backend cannot generate kernels for ``device``, in one line."""
    kind = torch.device(device).type
    if kind == "cpu" and not any(shutil.which(cxx) for cxx in ("c++", "g++", "clang++")):
        raise ConfigError("--compile on the CPU needs a C++ compiler (torch.compile's inductor backend builds its "
                          "kernels with one), and none is on PATH; install g++ or run without --compile")
    if kind == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            raise ConfigError("--compile on CUDA needs Triton (torch.compile's inductor backend writes its GPU "
                              "kernels in it); pip install triton or run without --compile")


def compile_module(module: torch.nn.Module, *, dynamic: bool | None = None) -> torch.nn.Module:
    """``module``, compiled in place (its ``__call__``; once: a compiled module is returned as it is).

    Refuses a TorchScript module (no Python forward for dynamo to trace)."""
    if getattr(module, "_compiled_call_impl", None) is not None:
        return module
    if any(isinstance(m, torch.jit.ScriptModule) for m in module.modules()):
        raise ConfigError("--compile cannot compile a TorchScript model (torch.compile traces Python forwards); "
                          "run it without --compile")
    _kernel_cache_per_isa()
    module.compile(dynamic=dynamic)
    return module


#: the environment settings that choose the CPU kernels' instruction set
ISA_SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR")


def _kernel_cache_per_isa() -> None:
    """Give each instruction-set setting its own inductor cache unless the user chose one
    (``TORCHINDUCTOR_CACHE_DIR``): inductor keys its cache without them, and kernels cached under the default
    setting, reused with ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_CBWR=AVX2``, gave NaN features
    (torch 2.14.1, CPU; ``tests/test_compile.py``)."""
    import os

    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    chosen = [f"{k}={os.environ[k]}" for k in ISA_SETTINGS if os.environ.get(k)]
    # inductor writes its default into the environment when first used: that one is not the user's choice
    if chosen and os.environ.get("TORCHINDUCTOR_CACHE_DIR", default_cache_dir()) == default_cache_dir():
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(default_cache_dir(), "isa-" + "-".join(chosen))


def compile_if(module: torch.nn.Module, enabled: bool, device: torch.device | str) -> torch.nn.Module:
    """``module`` compiled in place for ``device`` (:func:`check_compile`, :func:`compile_module`) when
    ``enabled`` (``--compile`` of eval and attack), else as it is."""
    if not enabled:
        return module
    check_compile(device)
    if not any(True for _ in module.parameters()):  # no torch graph to compile: an ONNX runtime session
        raise ConfigError("--compile needs a torch model with parameters; this one (an ONNX model?) has none: "
                          "run it without --compile")
    return compile_module(module)


def compile_trunk(model: torch.nn.Module) -> None:
    """Compile a :class:`~privreid.models.reid_net.ReIDModel`'s trunk in place: its backbone and its neck."""
    compile_module(model.backbone)
    if any(True for _ in model.neck.parameters()):  # not --neck none (an identity)
        compile_module(model.neck)


class CompileClock:
    """Seconds spent compiling during a ``with`` block: :mod:`torch._dynamo`'s own timings of tracing,
    compiling and lazily compiling backward graphs (:data:`_COMPILE_METRICS`), summed over the process, so a
    block that runs nothing else compiled measures its own compiles (``seconds``)."""

    def __enter__(self) -> "CompileClock":
        self.seconds, self._start = 0.0, _compile_seconds()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = _compile_seconds() - self._start


def _compile_seconds() -> float:
    from torch._dynamo.utils import compilation_time_metrics

    return float(sum(sum(compilation_time_metrics.get(key, ())) for key in _COMPILE_METRICS))


def compile_line(seconds: float) -> str:
    """The log line of a compiled run's compile time."""
    return f"torch.compile (--compile): {seconds:.1f} s compiling"
