"""What the server observes of a client's training step (the step and its leaks: :mod:`.observation`).

Batches and multi-step local updates are attacked under ``full`` only (:attr:`ThreatModel.client_steps`); the
shared threat models' exact surrogates hold for one image and one step. Threat models (``THREATS``; a new one
is a subclass and :func:`register_threat`):

* ``"full"``: the whole gradient, head included (DLG / iDLG, L2RW+'s Fig. 8, paper 003).
* ``"shared"``: only the method's shared keys (the checkpoint's ``global_state``), the realistic federated case.
  Not knowing the head, the attacker cannot evaluate the loss, but the shared bottleneck ``neck.fc`` hands it
  the upstream gradient: ``dL/d neck.fc.bias = dL/dz`` with ``z = neck.fc(pool(trunk(x)))``, so the surrogate
  ``<z(x'), dL/dz>`` has the client's trunk and ``neck.fc`` gradients at ``x' = x``
  (:func:`shared_surrogate_loss`); ``neck.bn`` is after the leak and not matched. Exact only when ``z`` is
  the trunk's only path to the loss: FedARKS' part branch is refused.
* ``"shared-feature"``: the same observation through the bottleneck's exact feature leak: for one image
  ``dL/dW_i = (dL/dz_i) h`` and ``dL/db_i = dL/dz_i``, so each row with ``dL/db_i != 0`` gives ``h = dL/dW_i /
  dL/db_i`` (docs/architecture.md, "Gradient inversion"); :func:`leak_bottleneck_feature` takes the
  least-squares combination of all rows, then feature inversion recovers the image. The BNNeck (no linear
  layer, frozen bias) leaks only ``dL/df * xhat``: both shared threats refuse it.
* ``"aggregate"``: secure aggregation's server view, the sum of ``--clients m`` clients' shared one-image
  updates, attacked like ``shared-feature`` (:class:`AggregateThreat`, campaign :mod:`.aggregate`).

The attacker knows every non-head parameter, local normalisation layers included (the strongest server, an
upper bound on leakage). Defenses (:mod:`.defenses`) act on the client's side before the observation.
"""

from __future__ import annotations

import torch
from torch import nn

from privreid.errors import ConfigError
from privreid.registry import Registry

from privreid.inversion.defenses import NO_DEFENSE, Defense, Gradients, defend_gradient, noisy_download
from privreid.inversion.observation import BOTTLENECK, Observation, client_gradient, leak_bottleneck_feature
from privreid.inversion.optimise import invert_feature, invert_shared_gradients


class ThreatModel:
    """What the server observes of a client's step and how an attacker reconstructs the image from it.

    ``name``: the ``--threat`` value; ``summary``: its help. Subclasses give the observed gradients
    (:meth:`visible`), refuse models (:meth:`check`) and run the reconstruction (:meth:`reconstruct`).
    ``needs_shared``: observes the shared upload only; ``single_upload`` False: a sum of uploads
    (:func:`.aggregate.attack_sums`).
    """

    name: str = ""
    summary: str = ""
    needs_shared: bool = True
    single_upload: bool = True
    #: the threat attacks batches of images and multi-step local updates (else one image's one-step gradient)
    client_steps: bool = False

    def check(self, model: nn.Module, shared: set[str]) -> None:
        """Raise :class:`ConfigError` with the reason when ``model`` cannot be attacked under this threat."""

    def visible(self, grads: Gradients, shared: set[str]) -> Gradients:
        """The part of the client's (defended) gradient the attacker observes: the shared keys by default."""
        return {n: g for n, g in grads.items() if n in shared}

    def reconstruct(self, model: nn.Module, observation: Observation, start: torch.Tensor, *, settings,
                    loss_fn: nn.Module, label_smoothing: float, generator: torch.Generator,
                    progress: bool) -> tuple[torch.Tensor, int | None, str | None]:
        """``(image (1, 3, H, W) in [0, 1], inferred label or None, label rule or None)``."""
        raise NotImplementedError


def _check_bottleneck(model: nn.Module, threat: str, shared: set[str]) -> None:
    """The shared threat models read the linear neck's bottleneck, which must be shared."""
    if not hasattr(getattr(model, "neck", None), "fc"):
        raise ConfigError(f"threat {threat!r} needs the linear neck's bottleneck layer {BOTTLENECK}; "
                          f"this model's neck is {getattr(model, 'neck_kind', '?')!r} (use --threat full)")
    missing = [f"{BOTTLENECK}.{p}" for p in ("weight", "bias") if f"{BOTTLENECK}.{p}" not in shared]
    if missing:
        raise ConfigError(f"threat {threat!r} needs {', '.join(missing)} among the shared parameters, but the "
                          "method keeps them on the client (use --threat full)")


class FullGradient(ThreatModel):
    """The whole gradient, head included (DLG / iDLG; L2RW+ Fig. 8): the attack infers or optimises the label."""

    name = "full"
    summary = "whole gradient, head included"
    needs_shared = False
    client_steps = True

    def visible(self, grads: Gradients, shared: set[str]) -> Gradients:
        return grads

    def reconstruct(self, model, observation, start, *, settings, loss_fn, label_smoothing, generator, progress):
        return settings.inversion_attack.invert_full(model, observation, start, settings=settings, loss_fn=loss_fn,
                                                     label_smoothing=label_smoothing, generator=generator,
                                                     progress=progress)


class SharedGradient(ThreatModel):
    """The shared keys only, attacked through the bottleneck's upstream gradient (:func:`shared_surrogate_loss`)."""

    name = "shared"
    summary = "shared keys only"

    def check(self, model: nn.Module, shared: set[str]) -> None:
        _check_bottleneck(model, self.name, shared)
        if getattr(model, "part", None) is not None:
            raise ConfigError("threat 'shared' needs the neck to be the trunk's only path to the loss; this model "
                              "has a part branch (use --threat shared-feature)")

    def reconstruct(self, model, observation, start, *, settings, loss_fn, label_smoothing, generator, progress):
        return invert_shared_gradients(model, observation, start, settings=settings, progress=progress), None, None


class SharedFeature(ThreatModel):
    """The shared keys, attacked through the bottleneck's exact feature leak, then feature inversion."""

    name = "shared-feature"
    summary = "the bottleneck's exact feature leak, then feature inversion"

    def check(self, model: nn.Module, shared: set[str]) -> None:
        _check_bottleneck(model, self.name, shared)

    def reconstruct(self, model, observation, start, *, settings, loss_fn, label_smoothing, generator, progress):
        feature = leak_bottleneck_feature(observation.grads)
        return invert_feature(model, feature, start, settings=settings, progress=progress), None, None


class AggregateThreat(SharedFeature):
    """The sum of ``m`` clients' shared one-image updates (secure aggregation's server), attacked as
    ``shared-feature``: a sum of their observations (:func:`.aggregate.aggregate_observation`), whose bottleneck
    leak mixes the ``m`` pooled features."""

    name = "aggregate"
    single_upload = False
    summary = ("the sum of --clients m clients' shared updates (what a server under secure aggregation sees), "
               "through the bottleneck's feature leak")


#: ``--threat`` name -> threat model, in ``--help`` order
THREATS: Registry[ThreatModel] = Registry(
    "threat model", builtins=lambda: (FullGradient(), SharedGradient(), SharedFeature(), AggregateThreat()))


def register_threat(threat: ThreatModel) -> ThreatModel:
    """Add ``threat`` to :data:`THREATS` (``--threat <name>`` then selects it everywhere); returns it."""
    return THREATS.register(threat)


def unregister_threat(name: str) -> None:
    """Remove threat model ``name`` (a test's or a notebook's own); unknown names are refused."""
    THREATS.unregister(name)


def check_model(model: nn.Module, threat: str, shared: set[str]) -> None:
    """Refuse a model the threat model cannot be applied to, with the reason."""
    model_threat = THREATS[threat]
    if getattr(model, "classifier", None) is None:
        raise ConfigError("the client's training step needs its classifier head; this model has none "
                          "(load it with the client whose step is attacked)")
    model_threat.check(model, shared)


def observe(model: nn.Module, image: torch.Tensor, label, *, threat: str, shared: set[str],
            loss_fn: nn.Module, defense: Defense = NO_DEFENSE, generator: torch.Generator | None = None,
            local_steps: int = 1, local_lr: float = 0.01) -> Observation:
    """The client's step on ``image`` (``(3, H, W)`` in ``[0, 1]`` with its label, or a batch with its labels;
    ``local_steps`` SGD steps at ``local_lr``) as the attacker observes it: computed on the noisy download
    (Eq. 15), clipped and noised (DP, Eq. 14), then the threat model's ``shared`` part observed."""
    check_model(model, threat, shared)
    batch = 1 if image.ndim == 3 else len(image)
    if (batch > 1 or local_steps > 1) and not THREATS[threat].client_steps:
        raise ConfigError(f"threat {threat!r} attacks one image's one-step update; batches (--batch) and local "
                          "steps (--local-steps) are attacked under --threat full")
    victim = noisy_download(model, shared, defense.download_beta, generator) if defense.download_beta > 0 \
        else model
    grads = client_gradient(victim, image, label, loss_fn, local_steps=local_steps, local_lr=local_lr)
    if defense.active:
        grads = defend_gradient(grads, beta=defense.beta, clip_norm=defense.clip_norm,
                                noise_multiplier=defense.noise_multiplier, generator=generator)
    return Observation(threat, THREATS[threat].visible(grads, shared), batch)
