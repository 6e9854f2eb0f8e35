"""Record-level DP-SGD on every client, with Opacus 1.6.

Abadi et al., "Deep Learning with Differential Privacy", CCS 2016.

``--dp-sgd`` wraps a method's client update (:func:`with_dp_sgd`).  Each local step then

1. draws a Poisson batch: every training image of the client independently with probability ``q = B / N_k`` (Opacus'
   :class:`~opacus.utils.uniform_sampler.UniformWithReplacementSampler`; batches vary in size and may be empty), in
   place of the method's sampler;
2. computes per-sample gradients (Opacus :class:`~opacus.GradSampleModule`);
3. clips each sample's gradient to L2 norm ``C`` (``--max-grad-norm``) over all trained parameters jointly, sums, adds
   ``N(0, (z C)^2)`` and divides by the expected batch size ``q N_k`` (Opacus :class:`~opacus.optimizers.DPOptimizer`
   around the method's own optimiser, so learning-rate groups, momentum and weight decay are the method's);
4. counts one step of the Poisson-subsampled Gaussian mechanism ``(z, q)`` in the client's accountant.

Per client: ``steps = E * min(N_k // B, max_steps_per_epoch)`` per round (Opacus' ``1/q`` batches an epoch), one RDP
accountant whose history lives in the client's memory (checkpointed, so ``--resume`` continues it;
:class:`~.accounting.ClientAccountant`).  ``--target-epsilon`` without ``--noise-multiplier`` derives each client's
``z`` for ``rounds x steps`` steps at its own ``q`` (conservative when ``--client-fraction`` < 1: it assumes the client
trains every round) and fixes it at the client's first round (kept in its memory), so a run extended with
``--resume --rounds`` stops when the budget would be exceeded (:class:`~privreid.defenses.PrivacyLedger`).

Model.  BatchNorm mixes the samples of a batch and has no per-sample gradient; the model has the ``group_norm`` model
transform (:func:`privreid.models.transforms.use_group_norm`: fresh GroupNorm, 32 groups on feature maps, 1 on
embeddings), and Opacus' ``ModuleValidator`` confirms the model before training.  privreid's ResNet has no in-place
residual operations, which Opacus' hooks need (docs/architecture.md).

Grad-sample mode: Opacus' hooks (:class:`~opacus.GradSampleModule`), the fastest mode for the batches DP-SGD draws
(``benchmarks/dp_overhead.py``, ResNet-18, this 2-core CPU): at 64x32 / batch 16 hooks 6.6x a non-private step, ghost
8.0x, functorch 11.2x, ew 15.0x; at 128x64 with Poisson batches of expected size 32, hooks 2.7x, ew 3.2x.  Only a
*fixed* batch of 32 or more favours ``ew`` (2.5x against 3.9x at 128x64): torch's ExpandedWeights computes
convolution per-sample gradients with grouped convolutions below 32 samples and with unfold + einsum from 32 on, and
Poisson batches of expected size 32 are smaller half of the time.  Hooks are registered on the layers, so per-sample
gradients come out of any entry point (``forward_train``, the part branch, a method's ``forward`` hook), where ``ew``
needs every step to go through its wrapper's ``forward``.

Refused with a :class:`~privreid.errors.ConfigError`, because the per-sample analysis would not hold or the method
would silently change:

* losses that couple the samples of a batch: the triplet loss (``--triplet-weight``, checked by
  :meth:`RunConfig.validate`) and methods that draw their own batches (an overridden ``loader``, e.g. DPPT's P x K
  batches for its circle loss);
* client updates that optimise tensors outside the model (FedReID's server copy, SKA's local generalised model):
  their gradients have no per-sample form;
* loss terms whose gradient is not a sum of per-sample gradients (FedProx's proximal term with ``mu > 0``): Opacus
  replaces the gradient by the noisy clipped per-sample sum, so such a term would be dropped without notice.  privreid
  checks at every step that the gradients of the 1-d parameters (biases, normalisation weights) equal the mean of
  their per-sample gradients (on the device; the client's round is refused at its end);
* uploads besides the model (``ctx.upload_extra``, DPPT's class centres), which DP-SGD does not privatise;
* SKA's attentive normalisation (batch statistics; :func:`use_group_norm` refuses it).

Which methods run under DP-SGD is declared by each method (``Method.dp_sgd_support``; ``privreid methods`` prints it)
and enforced when the defense wraps it: moon's contrastive term is per sample, and the fedpav-cdw/kd/cc variants'
probes and server steps use public data.

Scope of the guarantee (also in the run's ``summary.json``): each client's (epsilon_k, delta) bound covers its
training images (add/remove one image) against everything computed from its DP-trained parameters: its uploads in
every round and whatever the server and others derive from them.  It does not cover the scalar training metrics
privreid records (loss, samples seen), and the clients' dataset sizes are treated as public (they set ``q`` and
data-volume weights).  Noise comes from the seeded torch RNG, for reproducible and resumable runs; it is not
cryptographically secure (Opacus' ``secure_mode`` is not used).
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Iterator

import torch
from opacus import GradSampleModule
from opacus.data_loader import wrap_collate_with_empty
from opacus.optimizers import DPOptimizer
from opacus.utils.uniform_sampler import UniformWithReplacementSampler
from opacus.validators import ModuleValidator
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate

from privreid.config import RunConfig, dp_delta, dp_max_grad_norm
from privreid.errors import ConfigError
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.federated.registry import Method
from privreid.defenses.accounting import ClientAccountant, noise_for_epsilon

#: client-memory keys, also reported in ``Upload.reports``: the RDP history rows and the client's fixed noise multiplier
HISTORY_KEY = "dp_sgd/rdp_history"
NOISE_KEY = "dp_sgd/noise_multiplier"
#: the 1-d-parameter gradients must match the mean per-sample gradient to this relative L2 error, or to two
#: rounding units of the per-sample gradients' type where that is coarser (--precision bf16: 1.6e-2; measured
#: 2.5-3.8e-3 without an extra loss term, 2.9-3.5e-2 with FedProx's mu = 0.01)
ATTRIBUTION_TOLERANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class DPSGDPlan:
    """One client's DP-SGD parameters: Poisson rate, steps, noise, clipping bound, delta."""

    num_samples: int
    sample_rate: float
    steps_per_epoch: int
    steps_per_round: int
    noise_multiplier: float
    max_grad_norm: float
    delta: float
    target_epsilon: float | None

    @property
    def expected_batch_size(self) -> int:
        return max(1, round(self.sample_rate * self.num_samples))


def plan_for(config: RunConfig, num_samples: int, memory: dict | None = None) -> DPSGDPlan:
    """The DP-SGD plan of a client with ``num_samples`` training images (its memory holds a fixed ``z``)."""
    if num_samples <= 0:
        raise ConfigError("DP-SGD needs clients with training images")
    delta = dp_delta(config)
    if delta >= 1.0 / num_samples:
        raise ConfigError(f"--delta {delta:g} must be below 1/N = {1.0 / num_samples:.3g} for a client with "
                          f"N = {num_samples} images (delta >= 1/N allows publishing one image outright)")
    sample_rate = min(1.0, config.optim.batch_size / num_samples)
    steps_per_epoch = max(1, num_samples // config.optim.batch_size)
    if config.optim.max_steps_per_epoch is not None:
        steps_per_epoch = min(steps_per_epoch, config.optim.max_steps_per_epoch)
    steps_per_round = config.optim.local_epochs * steps_per_epoch
    if memory is not None and NOISE_KEY in memory:
        z = float(memory[NOISE_KEY])
    elif config.privacy.noise_multiplier is not None:
        z = float(config.privacy.noise_multiplier)
    else:
        z = noise_for_epsilon(config.privacy.target_epsilon, sample_rate, config.federation.rounds * steps_per_round, delta)
    return DPSGDPlan(num_samples, sample_rate, steps_per_epoch, steps_per_round, z, dp_max_grad_norm(config), delta,
                     config.privacy.target_epsilon)


def supervised_core(update) -> SupervisedUpdate:
    """The :class:`SupervisedUpdate` whose loop a client update runs (itself, or the ``inner`` of a wrapper)."""
    seen = update
    while not isinstance(seen, SupervisedUpdate):
        seen = getattr(seen, "inner", None)
        if seen is None:
            raise ConfigError(f"--dp-sgd needs a client update built on SupervisedUpdate; "
                              f"{type(update).__name__} is not")
    if type(seen).loader is not SupervisedUpdate.loader:
        raise ConfigError(f"--dp-sgd: {type(seen).__name__} draws its own batches (e.g. identity-balanced P x K "
                          "batches for a loss that couples samples); DP-SGD needs Poisson-sampled batches of "
                          "independent images")
    return seen


def poisson_loader(dataset, plan: DPSGDPlan, config: RunConfig, seed: int) -> DataLoader:
    """``plan.steps_per_epoch`` Poisson batches of ``dataset`` (rate ``plan.sample_rate``), empty ones included."""
    d = config.data
    sampler = UniformWithReplacementSampler(num_samples=len(dataset), sample_rate=plan.sample_rate,
                                            generator=torch.Generator().manual_seed(seed),
                                            steps=plan.steps_per_epoch)
    collate = wrap_collate_with_empty(collate_fn=default_collate,
                                      sample_empty_shapes=[(0, 3, d.height, d.width), (0,), (0,)],
                                      dtypes=[torch.float32, torch.int64, torch.int64])
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=config.runtime.num_workers)


class AttributionCheckingDPOptimizer(DPOptimizer):
    """Opacus' DPOptimizer that refuses gradients it cannot attribute to samples (see the module docstring).

    Every step is checked on the device; :meth:`check_attribution` reads the verdict once, at the end of the
    client's round (no host-device synchronisation per step)."""

    misattributed: torch.Tensor | None = None

    def pre_step(self, closure=None):
        self._check_attribution()
        return super().pre_step(closure)

    def _check_attribution(self) -> None:
        residual, scale, tolerance = None, None, ATTRIBUTION_TOLERANCE
        for p in self.params:
            if p.ndim != 1 or p.grad is None or getattr(p, "grad_sample", None) is None:
                continue
            per_sample = self._get_flat_grad_sample(p)
            if len(per_sample) == 0:
                return  # empty Poisson batch: nothing to compare
            tolerance = max(tolerance, 2 * torch.finfo(per_sample.dtype).eps)
            mean = per_sample.double().mean(0)
            r, s = (p.grad.double() - mean).pow(2).sum(), mean.pow(2).sum()
            residual, scale = (r, s) if residual is None else (residual + r, scale + s)
        if residual is not None:
            bad = residual.sqrt() > tolerance * scale.sqrt() + 1e-12
            self.misattributed = bad if self.misattributed is None else self.misattributed | bad

    def check_attribution(self) -> None:
        if self.misattributed is not None and bool(self.misattributed):
            raise ConfigError("--dp-sgd: the client update adds a loss term whose gradient is not a sum of "
                              "per-sample gradients (e.g. FedProx's proximal term: use --opt mu=0); DP-SGD "
                              "would silently drop it")


class PrivateTraining:
    """One client round of DP-SGD on ``model``: per-sample-gradient hooks on enter, removed on exit."""

    def __init__(self, model: torch.nn.Module, plan: DPSGDPlan, accountant: ClientAccountant):
        self.model, self.plan, self.accountant = model, plan, accountant
        self._stack = contextlib.ExitStack()
        self._optimizers: list[AttributionCheckingDPOptimizer] = []

    def __enter__(self) -> "PrivateTraining":
        errors = ModuleValidator.validate(self.model, strict=False)
        if errors:
            raise ConfigError(f"--dp-sgd: the model has layers without per-sample gradients: {errors[0]}")
        gsm = GradSampleModule(self.model, batch_first=True, loss_reduction="mean", strict=True,
                               force_functorch=False)
        self._stack.callback(gsm.cleanup)
        self._stack.enter_context(warnings.catch_warnings())
        # the first convolution's input needs no gradient; the full backward hooks warn about it at every step
        warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed")
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._stack.close()
        if exc_type is None:
            for optimizer in self._optimizers:
                optimizer.check_attribution()

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> DPOptimizer:
        """``optimizer`` made differentially private; refuses tensors that are not the model's parameters."""
        own = {id(p) for p in self.model.parameters()}
        foreign = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad and id(p) not in own]
        if foreign:
            raise ConfigError(f"--dp-sgd: the client update optimises {len(foreign)} tensor(s) outside the model "
                              "(a second model run with functional_call, e.g. FedReID's server copy or SKA's "
                              "local generalised model: --opt dual=false); Opacus has per-sample gradients only for the "
                              "model's own layers")
        dp = AttributionCheckingDPOptimizer(optimizer, noise_multiplier=self.plan.noise_multiplier,
                                            max_grad_norm=self.plan.max_grad_norm,
                                            expected_batch_size=self.plan.expected_batch_size,
                                            loss_reduction="mean")
        dp.attach_step_hook(lambda _: self.accountant.step(self.plan.noise_multiplier, self.plan.sample_rate))
        self._optimizers.append(dp)
        return dp


@contextlib.contextmanager
def _shadowed(obj, **attrs) -> Iterator[None]:
    """Set instance attributes for the duration of the block (they shadow methods of the class)."""
    for name, value in attrs.items():
        setattr(obj, name, value)
    try:
        yield
    finally:
        for name in attrs:
            delattr(obj, name)


class DPSGDUpdate:
    """A method's client update run as DP-SGD: Poisson batches, per-sample clipping, noise, accounting.

    The method's own loop runs unchanged; only its ``loader`` and
    ``optimizer`` hooks are replaced for the call.  Returns the inner
    update's metrics.
    """

    def __init__(self, inner, config: RunConfig):
        self.inner, self.config = inner, config
        self.core = supervised_core(inner)

    def __call__(self, ctx: ClientContext) -> dict[str, float]:
        plan = plan_for(ctx.config, len(ctx.client.train), ctx.memory)
        accountant = ClientAccountant.from_memory(ctx.memory, HISTORY_KEY)
        before = accountant.steps
        core = self.core
        method_loader, method_optimizer = core.loader, core.optimizer

        def loader(ctx_: ClientContext, epoch: int) -> DataLoader:
            return poisson_loader(method_loader(ctx_, epoch).dataset, plan, self.config, ctx_.seed + epoch)

        with PrivateTraining(ctx.model, plan, accountant) as session, \
                _shadowed(core, loader=loader,
                          optimizer=lambda model, round_index: session.wrap_optimizer(
                              method_optimizer(model, round_index))):
            metrics = self.inner(ctx)
        if ctx.upload_extra:
            raise ConfigError(f"--dp-sgd: the client update uploads {', '.join(sorted(ctx.upload_extra)[:3])} "
                              "besides the model; DP-SGD privatises only the trained parameters")
        if accountant.steps - before != plan.steps_per_round:
            raise RuntimeError(f"DP-SGD took {accountant.steps - before} steps, planned {plan.steps_per_round}")
        ctx.memory[NOISE_KEY] = torch.tensor(plan.noise_multiplier, dtype=torch.float64)
        accountant.save(ctx.memory, HISTORY_KEY)
        # the client keeps its accountant (it plans its own noise) and reports it for the server's ledger
        ctx.reports.update({k: ctx.memory[k] for k in (HISTORY_KEY, NOISE_KEY)})
        return metrics


def with_dp_sgd(method: Method) -> Method:
    """``method`` trained with DP-SGD on every client (the plugin adds the ``group_norm`` model transform)."""
    make_client_update = method.make_client_update
    return dataclasses.replace(
        method,
        make_client_update=lambda config: DPSGDUpdate(make_client_update(config), config),
    )
