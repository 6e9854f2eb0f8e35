"""Client updates: the local training step of a method.

A client update is a callable ``update(ctx) -> metrics``.  It trains the single resident model (already holding the
global shared state plus this client's local state) in place on the client's own images and returns scalar metrics.
Clients are the only code that touches images.  The forward pass and the loss run under ``--precision``'s autocast,
the backward through its loss scaler (:mod:`privreid.precision`; fp32: neither); with ``--compile``, the model's
trunk and the identity loss are compiled (:mod:`privreid.models.compilation`).

:class:`SupervisedUpdate` is the FedPav client (paper 004, Algorithm 1, lines 9-15): ``E`` local epochs of SGD over
batches of ``B`` images on the identity loss, with separate learning rates for the classifier (0.05) and the backbone
(0.005), multiplied by the run's schedule (:mod:`privreid.federated.lr_schedule`, ``--lr-schedule``; per round, or
per local epoch for ``local-step``).  The neck (embedding bottleneck) trains at the backbone's rate unless
``--lr-neck`` is given (FedPav's reference code trains its 512-d bottleneck at the classifier's rate; the paper
presets say so).  ``optimizer="adam"`` swaps SGD for Adam (same groups), which trains from scratch much faster than
the paper's SGD recipe, designed for ImageNet-initialised ResNet-50s; the CPU demo uses it.

The identity loss is cross-entropy with ``--label-smoothing`` (default 0.1; the five papers and their released code
use plain cross-entropy, 0).  Optionally a batch-hard triplet loss on the pre-neck features, with PK sampling,
weighted by ``ClientContext.triplet_weight`` (:meth:`~privreid.federated.registry.Method.triplet_weight_for`).
Methods that change the local objective (FedProx's proximal term, KD, ...) override
:meth:`SupervisedUpdate.extra_loss`.

Optimiser state (momentum) is created fresh every round, as in the FedPav reference code, unless a method keeps it in
the client's memory through :meth:`SupervisedUpdate.restore_optimizer` and :meth:`SupervisedUpdate.keep_optimizer`
(DPPT's ``persistent_optimizer``, :mod:`.optimizer_state`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch
from torch.utils.data import DataLoader, Dataset

from privreid.config import RunConfig, lr_neck
from privreid.data import ImageDataset, PKSampler, build_transforms
from privreid.data.types import ClientData
from privreid.losses import batch_hard_triplet_loss, identity_loss
from privreid.models import ReIDModel
from privreid.models.compilation import compile_module, compile_trunk
from privreid.precision import autocast, grad_scaler, to_device
from privreid.federated import fast_optim
from privreid.federated.lr_schedule import get_schedule, lr_factor
from privreid.federated.policy import StateDict

#: a drawn progress bar shows the loss of every LOG_EVERY-th step (each read waits for the device)
LOG_EVERY = 10


@dataclass
class ClientContext:
    """Everything a client update may use."""

    model: ReIDModel
    client: ClientData
    round: int
    config: RunConfig
    device: torch.device
    #: the model keys of what the server transmitted to this client (the strategy's ``configure``:
    #: the global shared state, or e.g. FedPav-CC's cluster model)
    global_state: StateDict
    seed: int
    progress: bool = False
    #: tensors this client keeps between rounds besides its local keys (a
    #: previous model for MOON, the server-model copy of FedReID, ...); saved
    #: in the checkpoint, private to the client: never sent to, nor written by, the server
    memory: dict = field(default_factory=dict)
    #: the current training batch, set by :class:`SupervisedUpdate` before it
    #: calls ``extra_loss`` (methods that run other models on the same batch)
    images: torch.Tensor | None = None
    #: tensors the client sends to the server besides its shared parameters
    #: (DPPT's class centres, L2RW+ Eq. 5), filled by the client update; the
    #: engine adds them to the upload, so they count in ``bytes_up``
    upload_extra: StateDict = field(default_factory=dict)
    #: tensors the client reports for the server's bookkeeping (``Upload.reports``: the DP-SGD
    #: accountant the privacy ledger reads), filled by the client update; not aggregated
    reports: StateDict = field(default_factory=dict)
    #: what the server transmitted besides model keys (DPPT's global centres of this client's
    #: identities, L2RW+ Sec. III-C step 4), for this round only
    received_extra: StateDict = field(default_factory=dict)
    #: the weight of the batch-hard triplet loss (:meth:`~privreid.federated.registry.Method.triplet_weight_for`)
    triplet_weight: float = 0.0


def client_loader(client: ClientData, config: RunConfig, seed: int, *, dataset: Dataset | None = None,
                  instances: int | None = None, triplet_weight: float = 0.0) -> DataLoader:
    """Training batches of the client's samples.

    ``dataset`` indexes ``client.train`` (default: its images with the training transform of
    :func:`~privreid.data.build_transforms`; DPPT passes channel-augmented images or clips).  PK batches when triplet
    is on (``K = instances_per_id``) or ``instances`` (``K``) is given.  The default dataset's batches are the decoded
    ``uint8`` images (``augment_later``): the client augments them on its training device
    (:func:`privreid.precision.to_device`), so loader workers only decode.  On CUDA, batches come in pinned memory, so
    their copy to the device does not block the step.
    """
    o, d = config.optim, config.data
    workers = config.runtime.num_workers
    if dataset is None:
        dataset = ImageDataset(client.train, build_transforms(d.height, d.width, train=True,
                                                              random_erasing=o.random_erasing),
                               augment_later=True)
    generator = torch.Generator().manual_seed(seed)
    pin = config.runtime.device != "cpu" and torch.cuda.is_available()
    if instances or triplet_weight > 0:
        k = instances or o.instances_per_id
        p = max(2, o.batch_size // k)
        sampler = PKSampler(client.train, p=p, k=k, seed=seed)
        return DataLoader(dataset, batch_size=p * k, sampler=sampler, drop_last=True,
                          num_workers=workers, generator=generator, pin_memory=pin)
    return DataLoader(dataset, batch_size=o.batch_size, shuffle=True, generator=generator,
                      drop_last=len(dataset) > o.batch_size, num_workers=workers, pin_memory=pin)


class SupervisedUpdate:
    """Identity (+ optional triplet) loss local training; FedPav's client."""

    def __init__(self, config: RunConfig):
        self.config = config
        self.criterion = identity_loss(config.optim.label_smoothing)
        if config.runtime.compile:
            compile_module(self.criterion, dynamic=True)  # one graph serves every client's classifier width

    def optimizer(self, model: ReIDModel, round_index: int) -> torch.optim.Optimizer:
        """SGD (or Adam) over the learning-rate groups, in this order (subclasses index them).

        0. body: every trainable parameter not in another group, at ``lr_backbone``;
        1. head: the classifier, at ``lr_head``;
        2. neck (only when ``--lr-neck`` is given): ``model.neck``, at ``lr_neck``.

        Without ``--lr-neck`` the neck is part of the body, so runs that do
        not set it are unchanged (same groups, same parameter order).  The
        implementation (fused, foreach or per-tensor) is the fastest one that
        trains the per-tensor loop's weights bit for bit (:mod:`.fast_optim`).
        """
        factor, o = lr_factor(self.config, round_index), self.config.optim
        head = list(model.classifier.parameters())
        neck = [p for p in model.neck.parameters() if p.requires_grad] if o.lr_neck is not None else []
        grouped = {id(p) for p in head + neck}
        body = [p for p in model.parameters() if p.requires_grad and id(p) not in grouped]
        groups = [{"params": body, "lr": o.lr_backbone * factor}, {"params": head, "lr": o.lr_head * factor}]
        if neck:
            groups.append({"params": neck, "lr": lr_neck(self.config) * factor})
        device = next(model.parameters()).device
        if o.optimizer == "adam":
            return fast_optim.build("adam", groups, device, weight_decay=o.weight_decay)
        return fast_optim.build("sgd", groups, device, momentum=o.momentum, weight_decay=o.weight_decay,
                                nesterov=o.momentum > 0)

    def extra_loss(self, ctx: ClientContext, pre_neck: torch.Tensor, feat: torch.Tensor,
                   logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
        """Hook for methods that add terms to the local objective."""
        return None

    def loader(self, ctx: ClientContext, epoch: int) -> DataLoader:
        """Hook: the batches of local epoch ``epoch`` (DPPT: PK batches with channel augmentation)."""
        return client_loader(ctx.client, self.config, ctx.seed + epoch, triplet_weight=ctx.triplet_weight)

    def forward(self, ctx: ClientContext, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Hook: ``(pre_neck, feat, logits)`` of a batch (V-DPPT: temporal mean over clip frames)."""
        return ctx.model.forward_train(images)

    def schedule_step(self, ctx: ClientContext, opt: torch.optim.Optimizer, epoch: int, step: int,
                      n_batches: int) -> None:
        """Hook called before every optimiser step, for per-step learning-rate schedules (DPPT's one-cycle).

        The default keeps the per-round rates of :meth:`optimizer`.
        """

    def restore_optimizer(self, ctx: ClientContext, opt: torch.optim.Optimizer) -> None:
        """Hook called once the round's optimiser is built, before training (default: it starts fresh)."""

    def keep_optimizer(self, ctx: ClientContext, opt: torch.optim.Optimizer) -> None:
        """Hook called after the round's training with its optimiser (default: the state is dropped)."""

    def __call__(self, ctx: ClientContext) -> dict[str, float]:
        from privreid.log import progress_bar

        model = ctx.model
        if self.config.runtime.compile:  # in place, once: the trunk keeps its state_dict keys (the classifier changes per client)
            compile_trunk(model)
        model.train()
        opt = self.optimizer(model, ctx.round)
        self.restore_optimizer(ctx, opt)
        schedule = get_schedule(self.config)
        round_rates = [group["lr"] for group in opt.param_groups]
        scaler = grad_scaler(self.config.runtime.precision, ctx.device)
        # the loss is summed on the device in float64 (the bits of the former Python sum) and read once, at the
        # end: no host-device synchronisation per step; a drawn bar reads it every LOG_EVERY steps
        total, steps, seen = torch.zeros((), dtype=torch.float64, device=ctx.device), 0, 0
        for epoch in range(self.config.optim.local_epochs):
            if schedule.per_epoch and epoch > 0:  # local-step: the rate changes between local epochs
                scale = lr_factor(self.config, ctx.round, epoch) / lr_factor(self.config, ctx.round, 0)
                for group, rate in zip(opt.param_groups, round_rates):
                    group["lr"] = rate * scale
            loader = self.loader(ctx, epoch)
            if isinstance(loader.sampler, PKSampler):
                loader.sampler.set_epoch(epoch)
            cap = self.config.optim.max_steps_per_epoch
            n_batches = len(loader) if cap is None else min(len(loader), cap)
            # islice, not a break after the cap: a break would first load (and draw the augmentation
            # of) one batch past the cap, shifting the random stream of every later epoch and client
            bar = progress_bar(itertools.islice(loader, n_batches), total=n_batches,
                               desc=f"  {ctx.client.name} ep{epoch + 1}", leave=False, enabled=ctx.progress)
            augment = loader.dataset.augmentation() if isinstance(loader.dataset, ImageDataset) else None
            for step, (images, labels, _) in enumerate(bar):
                images, labels = (to_device(images, ctx.device, augment, channels_last=self.config.runtime.channels_last),
                                  labels.to(ctx.device))
                ctx.images = images
                with autocast(self.config.runtime.precision, ctx.device):
                    pre_neck, feat, logits = self.forward(ctx, images)
                    loss = self.criterion(logits, labels)
                    if ctx.triplet_weight > 0:
                        loss = loss + ctx.triplet_weight * batch_hard_triplet_loss(pre_neck, labels,
                                                                                   self.config.optim.triplet_margin)
                    extra = self.extra_loss(ctx, pre_neck, feat, logits, labels)
                    if extra is not None:
                        loss = loss + extra
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                self.schedule_step(ctx, opt, epoch, step, n_batches)
                scaler.step(opt)
                scaler.update()
                if len(labels):  # a Poisson batch (DP-SGD) can be empty; its mean loss is NaN
                    total += loss.detach().double() * len(labels)
                seen += len(labels)
                steps += 1
                if not bar.disable and step % LOG_EVERY == 0:
                    bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
        self.keep_optimizer(ctx, opt)
        return {"loss": float(total) / max(seen, 1), "steps": float(steps), "samples_seen": float(seen)}
