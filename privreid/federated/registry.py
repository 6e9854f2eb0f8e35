"""Method registry.

A method = parameter policy + client update + server strategy (docs/architecture.md). Each method module builds a
:class:`Method` and calls :func:`register`; the engine looks methods up by name and never imports a method module."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from privreid.config import RunConfig
from privreid.data.types import ClientData
from privreid.registry import Registry
from privreid.federated.method_options import NoOptions, parse_options
from privreid.federated.policy import ParameterPolicy, StateDict
from privreid.federated.strategy import Strategy

#: ``start(ctx)``: turns the model the engine loaded (received state + the
#: client's local state) into the model local training starts from, in place
ClientStart = Callable[[Any], None]


@dataclass(frozen=True)
class Method:
    """Everything the engine needs to know about a training method.

    Attributes:
        name: registry key (``--method NAME``).
        summary: one line for ``--help`` and reports.
        policy: which state keys are shared / local (or ``config -> policy``, for SKA's ablations).
        make_client_update: ``config -> callable(ClientContext) -> metrics``.
        make_strategy: ``(config, model_config) -> Strategy``: what each client receives (``Strategy.configure``;
            default: the global state) and how the server combines the uploads (``Strategy.aggregate``).
            ``model_config`` is the clients' network (:meth:`model_config`, its defenses' model transforms included:
            DP-SGD's group_norm), for a server that runs the uploaded states (FedPav-KD/CC); build the strategy with
            :meth:`strategy`, which passes it.
        has_global_model: whether the run produces a global model (standalone training evaluates its clients').
        communicates: whether rounds involve client-server transfers (False for centralised training).
        prepare_clients: optional rewrite of the client list before training (centralised training pools them).
        make_prepare_clients: ``config -> prepare_clients or None``, for client rewrites that depend on the options
            (DPPT's shared classifier relabels identities with global labels); see :meth:`prepare_clients_for`.
        make_client_start: ``config -> ClientStart``: what a client does with what it received before training
            (FedReID's half-average, paper 002 Eq. 8; default: train the loaded model as it is).  Client-side
            defenses wrap it (FedReID's Eq. 15 noise, :mod:`privreid.defenses.beta_noise.mechanism`).
        global_eval_state: ``(global_state, client_states) -> state`` to evaluate the global model with, for methods
            whose global model needs local keys (default: the global state).
        options: a frozen dataclass (fields with defaults); values come from ``FederationConfig.method_options``
            (``--opt key=value``), parsed by :func:`~privreid.federated.method_options.parse_options`.
        model_transforms: the transforms the method's network needs on top of the base model
            (:mod:`privreid.models.transforms`; FedReID's 2-FC head: ``("mlp_head",)``), as transforms, names or
            ``to_config()`` dicts, or ``config -> transforms`` (SKA's ablations).  Defenses add theirs in ``wrap``.
        client_fraction: the default fraction C of clients per round (``--client-fraction``).
        triplet_weight: the default weight of the batch-hard triplet loss (``--triplet-weight``; FedARKS Eq. 2: 1).
        keeps_trained_model: which model a client's personalised (``scope: "local"``) metrics score, and
            ``load_model(ckpt, client=...)`` returns (:func:`privreid.checkpoint.personal_state`): ``False``
            (default): the global model with the client's local keys, as held once the round's aggregate arrived
            (SKA's LS model after SelectUpdate, paper 000 Alg. 1 lines 7-8; FedBN's local models); ``True``: the
            client's model as its last local training left it (FedPav's "local model", paper 004 Sec. 4.1; FedReID's
            client model), whose shared keys the engine keeps in the client's memory
            (:data:`privreid.checkpoint.TRAINED_PREFIX`: one model copy per client, on disk, in RAM only while used,
            :mod:`privreid.federated.memory_store`).  A client that has not trained yet is scored with the global
            model and its initial local keys.
        needs_per_client_uploads: whether the server reads each client's upload on its own (CDW and KS weights, KD
            soft labels, clustering) rather than only their weighted sum; ``True`` methods cannot run under
            ``--secure-aggregation`` (:mod:`privreid.defenses.secure_aggregation.mechanism`).  ``None``: not
            declared (refused); non-federated methods leave it ``None``.
        exchanges_extras: whether clients and server also exchange tensors that are not model keys (DPPT's class
            centres), or ``config -> bool``.  In-process secure aggregation sums them with their indicators;
            Flower's SecAgg+ carries model updates only, so ``flower run --secure-aggregation`` refuses such runs
            before it starts.
        dp_sgd_support: whether the method can train under ``--dp-sgd`` (:mod:`privreid.defenses.dp_sgd.mechanism`):
            ``"yes"``, ``"yes (condition)"`` or ``"no (why)"``; ``None`` and ``"no ..."`` are refused in one line
            before anything trains.
        lr_factor: ``(config, round_index) -> factor`` where the method replaces ``--lr-schedule`` with its own
            (DPPT's per-step one-cycle, reported at each round's first step by
            :func:`privreid.federated.lr_schedule.lr_table`); ``None``: the run's schedule."""

    name: str
    summary: str
    policy: ParameterPolicy | Callable[[RunConfig], ParameterPolicy]
    make_client_update: Callable[[RunConfig], Callable]
    make_strategy: Callable[[RunConfig, dict[str, Any]], Strategy]
    has_global_model: bool = True
    communicates: bool = True
    prepare_clients: Callable[[list[ClientData]], list[ClientData]] | None = None
    make_prepare_clients: Callable[[RunConfig], Callable[[list[ClientData]], list[ClientData]] | None] | None = None
    make_client_start: Callable[[RunConfig], ClientStart] | None = None
    global_eval_state: Callable[[StateDict, dict[str, StateDict]], StateDict] | None = None
    options: type = NoOptions
    model_transforms: Sequence[Any] | Callable[[RunConfig], Sequence[Any]] = ()
    client_fraction: float = 1.0
    triplet_weight: float = 0.0
    keeps_trained_model: bool = False
    needs_per_client_uploads: bool | None = None
    exchanges_extras: bool | Callable[[RunConfig], bool] = False
    dp_sgd_support: str | None = None
    lr_factor: Callable[[RunConfig, int], float | None] | None = None

    def policy_for(self, config: RunConfig) -> ParameterPolicy:
        return self.policy if isinstance(self.policy, ParameterPolicy) else self.policy(config)

    def prepare_clients_for(self, config: RunConfig) -> Callable[[list[ClientData]], list[ClientData]] | None:
        """The client rewrite under ``config`` (``None``: the clients train as partitioned)."""
        return self.make_prepare_clients(config) if self.make_prepare_clients else self.prepare_clients

    def exchanges_extras_for(self, config: RunConfig) -> bool:
        """:attr:`exchanges_extras` under ``config``."""
        return bool(self.exchanges_extras(config) if callable(self.exchanges_extras) else self.exchanges_extras)

    def triplet_weight_for(self, config: RunConfig) -> float:
        """The weight of the batch-hard triplet loss: ``--triplet-weight``, else :attr:`triplet_weight`."""
        return self.triplet_weight if config.optim.triplet_weight is None else config.optim.triplet_weight

    def model_transforms_for(self, config: RunConfig) -> list[Any]:
        """The model transforms of this method's network under ``config`` (transforms, names or dicts)."""
        return list(self.model_transforms(config) if callable(self.model_transforms) else self.model_transforms)

    def model_config(self, config: RunConfig) -> dict[str, Any]:
        """The ``model_config`` (:meth:`privreid.models.ReIDModel.model_config`) of the network this method
        trains under ``config``, without classifier: ``config.model``'s base model and the method's transforms."""
        from privreid.models import make_transform

        m = config.model
        return {"arch": m.arch, "num_classes": 0, "neck": m.neck, "feat_dim": m.feat_dim, "last_stride": m.last_stride,
                **({"dropout": m.dropout} if m.dropout else {}),
                "transforms": [make_transform(t).to_config() for t in self.model_transforms_for(config)]}

    def strategy(self, config: RunConfig) -> Strategy:
        """The server strategy under ``config``: :attr:`make_strategy` given this method's :meth:`model_config`."""
        return self.make_strategy(config, self.model_config(config))

    def adding_model_transforms(self, *transforms: Any) -> Method:
        """This method with ``transforms`` after its own model transforms (a defense's ``wrap``: DP-SGD's group_norm)."""
        own = self.model_transforms_for
        return dataclasses.replace(self, model_transforms=lambda config: [*own(config), *transforms])

    def build_model(self, config: RunConfig, *, initial_weights: bool = True):
        """The network this method trains under ``config`` (:meth:`model_config`), with ``config.model``'s weights;
        ``initial_weights=False`` skips ``--pretrained`` / ``--weights`` (same names, shapes and trainable flags)."""
        from privreid.models import build_from_config

        m = config.model
        return build_from_config(self.model_config(config), pretrained=m.pretrained if initial_weights else None,
                                 weights=m.weights if initial_weights else None)

    def settings(self, config: RunConfig) -> Any:
        """The run's options: an instance of :attr:`options` (``--opt`` values typed, else the defaults)."""
        return parse_options(self.options, config.federation.method_options, self.name)

    def option(self, config: RunConfig, key: str) -> Any:
        """The value of option ``key``: ``--opt`` if given (typed), else the method's default."""
        return getattr(self.settings(config), key)

    def check_options(self, config: RunConfig) -> None:
        """Raise :class:`ConfigError` for an unknown option or a value of the wrong type."""
        self.settings(config)


#: every training method by name (``--method NAME``); the built-ins register when first used
METHODS: Registry[Method] = Registry("method", builtins=("privreid.federated.methods",))


def register(method: Method) -> Method:
    """Add ``method`` (``--method NAME`` then selects it); ConfigError when its name is taken."""
    return METHODS.register(method)


def unregister(name: str) -> None:
    """Remove method ``name`` (a test's or a notebook's own method); unknown names are refused."""
    METHODS.unregister(name)


def available_methods() -> list[str]:
    return sorted(METHODS.names())


def get_method(name: str) -> Method:
    """The method ``name``; ConfigError naming the registered ones otherwise.  Called by the composition root
    (:func:`privreid.composition.method_of`) alone: every other module is given the resolved method."""
    return METHODS.get(name)


def check_method_name(name: str) -> None:
    """ConfigError naming the registered methods unless one is called ``name`` (a checkpoint's check)."""
    METHODS.get(name)
