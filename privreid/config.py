"""Run configuration.

One :class:`RunConfig` describes a training run completely: which data, which
partition protocol, which model and which method with which hyper-parameters.
It is plain data (dataclasses of primitives) so that it is saved inside every
checkpoint with ``torch.load(weights_only=True)``-safe types, and a run can be
rebuilt from its checkpoint alone.

Defaults follow FedPav (Zhuang et al., paper 004, Sec. 3.5): SGD with momentum
0.9 and weight decay 5e-4, batch 32, one local epoch, learning rate 0.05 for
the identity classifier and 0.005 for the backbone, step decay gamma 0.1 every
40 rounds.  The paper starts from ImageNet weights; training from scratch (the
only option offline) needs a larger backbone learning rate, which the demo
passes explicitly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError


@dataclass
class DataConfig:
    """Where the data comes from and how it is split into clients.

    ``roots`` empty (or ``["synth"]``) means the embedded synthetic federation.
    """

    roots: list[str] = field(default_factory=list)
    format: str = "auto"
    protocol: str = "by-dataset"
    train_domains: list[str] | None = None
    test_domains: list[str] | None = None
    num_clients: int | None = None
    height: int = 128
    width: int = 64
    synth_seed: int = 0


@dataclass
class ModelConfig:
    """Backbone and neck; see :func:`privreid.models.build_model`."""

    arch: str = "resnet18"
    neck: str = "linear"
    feat_dim: int = 512
    last_stride: int = 1
    pretrained: str | None = None
    weights: str | None = None


@dataclass
class TrainConfig:
    """The method and its optimisation hyper-parameters."""

    method: str = "fedpav"
    rounds: int = 10
    optimizer: str = "sgd"
    local_epochs: int = 1
    batch_size: int = 32
    lr_backbone: float = 0.005
    lr_head: float = 0.05
    lr_step: int = 40
    lr_gamma: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    label_smoothing: float = 0.1
    random_erasing: float = 0.5
    triplet_weight: float = 0.0
    triplet_margin: float = 0.3
    instances_per_id: int = 4
    client_fraction: float | None = None
    max_steps_per_epoch: int | None = None
    eval_every: int = 1
    eval_flip: bool = False
    num_workers: int = 0
    seed: int = 0
    device: str = "auto"
    method_options: dict[str, Any] = field(default_factory=dict)
    beta: float = 0.0
    beta_mode: str = "upload"


@dataclass
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        try:
            return cls(
                data=DataConfig(**d["data"]),
                model=ModelConfig(**d["model"]),
                train=TrainConfig(**d["train"]),
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"incompatible run configuration: {exc}") from exc

    def validate(self) -> "RunConfig":
        """Check value ranges; raise :class:`ConfigError` naming the bad field."""
        t, d = self.train, self.data
        checks = [
            (t.rounds > 0, f"rounds must be > 0 (got {t.rounds})"),
            (t.local_epochs > 0, f"local_epochs must be > 0 (got {t.local_epochs})"),
            (t.batch_size > 0, f"batch_size must be > 0 (got {t.batch_size})"),
            (t.client_fraction is None or 0.0 < t.client_fraction <= 1.0,
             f"client_fraction must be in (0, 1] (got {t.client_fraction})"),
            (t.lr_backbone >= 0 and t.lr_head >= 0, "learning rates must be >= 0"),
            (t.eval_every > 0, f"eval_every must be > 0 (got {t.eval_every})"),
            (t.lr_step > 0, f"lr_step must be > 0 (got {t.lr_step})"),
            (t.triplet_weight >= 0, "triplet_weight must be >= 0"),
            (t.beta >= 0, f"beta must be >= 0 (got {t.beta})"),
            (t.beta_mode in ("upload", "download", "both"), f"beta_mode must be upload, download or both "
             f"(got {t.beta_mode!r})"),
            (t.optimizer in ("sgd", "adam"), f"optimizer must be sgd or adam (got {t.optimizer!r})"),
            (t.instances_per_id > 0, "instances_per_id must be > 0"),
            (t.max_steps_per_epoch is None or t.max_steps_per_epoch > 0, "max_steps_per_epoch must be > 0"),
            (d.height >= 16 and d.width >= 8, f"image size {d.height}x{d.width} is too small (min 16x8)"),
            (t.device in ("auto", "cpu", "cuda") or t.device.startswith("cuda:"),
             f"device must be auto, cpu or cuda (got {t.device!r})"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)
        return self
