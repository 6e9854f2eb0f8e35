"""The run-configuration options of the CLI, declared once.

Each option of ``privreid train`` (and the subset ``privreid flower run`` takes) that sets a
:class:`~privreid.config.RunConfig` field is one entry of :data:`CONFIG_OPTIONS`: the field it sets, its flag and its
help text.  Default and type come from the field (the dataclasses in :mod:`privreid.config` hold the only defaults);
an entry names another command-line type only where the option is typed differently (comma lists, paths, repeatable
``--data`` / ``--opt``), with the conversion.

:func:`config_options` adds the named options, and ``--set``, to a typer command's signature; :func:`run_config`
builds the run configuration from the command's parameters by the same table, then applies ``--set``
(:func:`privreid.config.sets.apply_sets`).  Options that do not set a field (``--out``, ``--resume``, ...) stay in the
command's own signature.  :func:`settings_options` does the same for a command's own settings dataclass (``privreid
invert``'s :class:`~privreid.inversion.settings.InversionSettings`): one option per field, with its default and type.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import click
import typer

from privreid.config import (BETA_MODES, EVAL_APS, EVAL_METRICS, LR_SCHEDULES, NECKS, OPTIMIZERS, PRECISIONS, PROTOCOLS,
                             RunConfig, field_types)
from privreid.config.sets import apply_sets
from privreid.data.formats import format_help
from privreid.commands.common import ARCHS, DATA_HELP, DeviceType, csv_names, parse_method_options


#: the help panels of ``privreid train --help``, in order (each :class:`ConfigOption` names one)
PANELS = DATA, MODEL, TRAINING, FEDERATION, DEFENSES, EVALUATION, OUTPUT = (
    "Data", "Model", "Training", "Federation", "Defenses", "Evaluation", "Output")


@dataclass(frozen=True)
class ConfigOption:
    """One command-line option that sets the run-configuration field ``path`` (``section.field``), listed in the
    help panel ``panel``."""

    path: str
    decls: tuple[str, ...]
    help: str
    panel: str
    #: the option's type when it differs from the field's, with ``to_config`` converting its value
    cli_type: Any = None
    to_config: Callable[[Any], Any] | None = None
    #: the values the option takes, shown as choices in the help and checked when parsed
    choices: tuple[str, ...] | None = None
    #: the option's click type where one checks and shows its values otherwise (``--device``)
    click_type: click.ParamType | None = None


def _o(path: str, *decls_and_help: str, panel: str, cli_type: Any = None, to_config: Callable | None = None,
       choices: tuple[str, ...] | None = None, click_type: click.ParamType | None = None) -> ConfigOption:
    return ConfigOption(path, decls_and_help[:-1], decls_and_help[-1], panel, cli_type, to_config, choices, click_type)


#: option (parameter) name -> the field it sets; ``privreid train --help`` lists them in this order
CONFIG_OPTIONS: dict[str, ConfigOption] = {
    "method": _o("federation.method", "Training method (see `privreid methods`).", panel=FEDERATION),
    "data": _o("data.roots", "--data", DATA_HELP, cli_type=Optional[list[str]],
               to_config=lambda roots: [str(d) for d in roots or []], panel=DATA),
    "fmt": _o("data.format", "--format", f"Dataset layout for --data roots: {format_help()}. See docs/formats.md.",
              panel=DATA),
    "protocol": _o("data.protocol",
        "Partition: by-dataset, by-camera or by-identity; the L2RW+ privacy protocols ci (camera "
        "independence: one client per camera), ei (entity independence: one client per dataset) or es (entity"
        " sharing: the datasets pooled into one client); ei and es need a held-out --test-domains entity.", panel=DATA,
        choices=PROTOCOLS),
    "train_domains": _o("data.train_domains",
        "Comma-separated training domains (default: all but --test-domains; synth holds out its last domain).",
        cli_type=Optional[str], to_config=lambda v: csv_names(v, "--train-domains"), panel=DATA),
    "test_domains": _o("data.test_domains", "Comma-separated held-out (unseen) domains.", cli_type=Optional[str],
                       to_config=lambda v: csv_names(v, "--test-domains"), panel=DATA),
    "num_clients": _o("data.num_clients", "Clients per domain for --protocol by-identity.", panel=DATA),
    "rounds": _o("federation.rounds", "Communication rounds (epochs for centralized/standalone).", panel=FEDERATION),
    "local_epochs": _o("optim.local_epochs", "Local epochs E per round.", panel=TRAINING),
    "batch_size": _o("optim.batch_size", "Batch size B.", panel=TRAINING),
    "optimizer": _o("optim.optimizer", "sgd (FedPav: momentum 0.9, wd 5e-4) or adam.", panel=TRAINING,
                    choices=OPTIMIZERS),
    "lr_backbone": _o("optim.lr_backbone", "Backbone learning rate (FedPav: 0.005).", panel=TRAINING),
    "lr_head": _o("optim.lr_head", "Classifier learning rate (FedPav: 0.05).", panel=TRAINING),
    "lr_neck": _o("optim.lr_neck",
        "Neck (embedding bottleneck) learning rate (default: --lr-backbone; FedPav's and L2RW+'s reference "
        "code train it at the classifier's rate).", panel=TRAINING),
    "lr_step": _o("optim.lr_step", "The N of --lr-schedule (rounds; local epochs for local-step).", panel=TRAINING),
    "lr_schedule": _o("optim.lr_schedule", "Learning-rate schedule: step (x gamma every N rounds), once (x gamma "
        "from round N on), local-step (x gamma every N local epochs, restarting each round) or none.",
        panel=TRAINING, choices=LR_SCHEDULES),
    "lr_gamma": _o("optim.lr_gamma", "Learning-rate decay factor.", panel=TRAINING),
    "client_fraction": _o("federation.client_fraction",
        "Fraction C of clients sampled per round (default: the method's; 1.0, FedReID 0.5).", panel=FEDERATION),
    "triplet_weight": _o("optim.triplet_weight",
        "Weight of the batch-hard triplet loss (0 = off; on switches to PK sampling). Default: the method's "
        "(FedARKS 1, its Eq. 2; others 0).", panel=TRAINING),
    "label_smoothing": _o("optim.label_smoothing",
        "Label smoothing of the identity cross-entropy (0 = plain cross-entropy, as in all five papers and "
        "their code).", panel=TRAINING),
    "random_erasing": _o("optim.random_erasing", "Random-erasing probability (data augmentation).", panel=TRAINING),
    "dropout": _o("model.dropout",
        "Dropout on the feature before the identity classifier, training only (FedPav's reference code: 0.5).",
        panel=MODEL),
    "max_steps": _o("optim.max_steps_per_epoch", "Cap on batches per local epoch (quick runs).", panel=TRAINING),
    "eval_every": _o("evaluation.every",
        "Evaluate every k rounds and after the last; 0 = after the last only.", panel=EVALUATION),
    "eval_flip": _o("evaluation.flip", "--eval-flip",
        "Evaluate with the mean feature of each image and its mirror (FedPav's reference code does).",
        panel=EVALUATION),
    "eval_metric": _o("evaluation.metric",
        "Rank by euclidean (squared distance) or cosine (L2-normalised features: FedPav's and L2RW+'s code).",
        panel=EVALUATION, choices=EVAL_METRICS),
    "eval_ap": _o("evaluation.ap",
        "Average precision: torchreid (over queries with a positive) or devkit (the Market-1501 devkit's trapezoid "
        "rule over all queries: FedPav's reference code).", panel=EVALUATION, choices=EVAL_APS),
    "report_best": _o("evaluation.report_best",
        "summary.json's `best` block: 1 = the last evaluation; K > 1 = the mean of the K global evaluations "
        "with the highest mean seen rank-1 (FedPav reports K = 3, evaluated every 10 rounds).", panel=EVALUATION),
    "opt": _o("federation.method_options", "--opt",
        "Method option key=value (repeatable), e.g. --opt mu=0.01; `privreid methods` lists each method's "
        "options.",
        cli_type=Optional[list[str]], to_config=parse_method_options, panel=FEDERATION),
    "beta": _o("privacy.beta",
        "FedReID white-noise scale beta (Eq. 14/15), for any method; 0 = off. No formal privacy guarantee.",
        panel=DEFENSES),
    "beta_mode": _o("privacy.beta_mode",
        "Where beta noise is added: upload (Eq. 14), download (Eq. 15) or both.", panel=DEFENSES, choices=BETA_MODES),
    "dp_sgd": _o("privacy.dp_sgd", "--dp-sgd",
        "Record-level DP-SGD (Opacus) on every client: Poisson batches, per-sample clipping, Gaussian noise, "
        "RDP accounting; BatchNorm becomes GroupNorm.", panel=DEFENSES),
    "client_dp": _o("privacy.client_dp", "--client-dp",
        "Client-level DP (DP-FedAvg): clip each client update to --clip, Gaussian noise on the uniform mean.",
        panel=DEFENSES),
    "noise_multiplier": _o("privacy.noise_multiplier", "DP noise std / clipping bound (z).", panel=DEFENSES),
    "max_grad_norm": _o("privacy.max_grad_norm", "DP-SGD per-sample clipping bound C (default 1.0).", panel=DEFENSES),
    "clip": _o("privacy.clip", "Client-level DP: L2 bound S of a client update.", panel=DEFENSES),
    "target_epsilon": _o("privacy.target_epsilon",
        "DP budget: training stops before epsilon would exceed it; with --dp-sgd and no --noise-multiplier "
        "the noise is derived from it for the planned rounds.", panel=DEFENSES),
    "delta": _o("privacy.delta", "DP delta (default 1e-5; must be below 1/N).", panel=DEFENSES),
    "secure_aggregation": _o("privacy.secure_aggregation", "--secure-aggregation",
        "The server learns only the sum of each round's uploads (SecAgg+ on Flower's primitives); methods "
        "whose server reads each upload are refused (`privreid methods`). With --client-dp: distributed DP.",
        panel=DEFENSES),
    "secagg_shares": _o("privacy.secagg_shares",
        "Secure aggregation: shares of each client's secrets (default: all clients of the round).", panel=DEFENSES),
    "secagg_threshold": _o("privacy.secagg_threshold",
        "Secure aggregation: shares that reconstruct a secret (default: a majority of the shares).", panel=DEFENSES),
    "secagg_clip": _o("privacy.secagg_clip",
        "Secure aggregation: clipping range of the pre-scaled update values (Flower's 8); values beyond it "
        "are counted as saturated.", panel=DEFENSES),
    "secagg_quantization": _o("privacy.secagg_quantization",
        "Secure aggregation: quantisation range (Flower's 2**22).", panel=DEFENSES),
    "secagg_max_weight": _o("privacy.secagg_max_weight",
        "Secure aggregation: public bound of a client's weight (default: the largest of the round).", panel=DEFENSES),
    "arch": _o("model.arch", "Backbone (a ResNet).", panel=MODEL, choices=ARCHS),
    "neck": _o("model.neck", "Neck: linear (Linear+BN embedding), bnneck, or none (the pooled trunk feature, as "
        "Wu & Gong's FedReID / SKA code retrieves).", panel=MODEL, choices=NECKS),
    "feat_dim": _o("model.feat_dim", "Embedding size of the linear neck.", panel=MODEL),
    "last_stride": _o("model.last_stride", "Stride of the last ResNet stage (1 or 2).", panel=MODEL),
    "pretrained": _o("model.pretrained",
        "'imagenet' for torchvision weights (needs internet); 'none' overrides a preset.",
        to_config=lambda v: None if v in (None, "none") else v, panel=MODEL),
    "weights": _o("model.weights", "Initial weights from a local state-dict file.", cli_type=Optional[Path],
                  to_config=lambda v: str(v) if v else None, panel=MODEL),
    "height": _o("data.height", "Input height.", panel=DATA),
    "width": _o("data.width", "Input width.", panel=DATA),
    "audit_holdout": _o("data.audit_holdout",
        "Keep this seeded fraction of each client's training images out of training, recorded in the "
        "checkpoint (image-level membership audits: `privreid audit`).", panel=DATA),
    "seed": _o("runtime.seed", "Random seed (runs are deterministic for a seed).", panel=TRAINING),
    "device": _o("runtime.device", "Where training runs: CUDA when available (auto), the CPU or a CUDA device.",
                 panel=TRAINING, click_type=DeviceType()),
    "workers": _o("runtime.num_workers", "Data-loading worker processes.", panel=DATA),
    "precision": _o("runtime.precision",
        "fp32, bf16 or fp16: autocast of training and evaluation (fp16 with a gradient scaler; DP-SGD takes "
        "fp32 or bf16). Default fp32, as the papers.", panel=TRAINING, choices=PRECISIONS),
    "compile": _o("runtime.compile", "--compile",
        "torch.compile the model's trunk and the identity loss (the classifier stays eager); the compile time "
        "is logged and in summary.json (compile_seconds). Not with --dp-sgd. Checkpoints are unchanged.",
        panel=TRAINING),
}

#: ``--precision`` of the commands that run a model outside a training run (eval, attack): the help of train's
PrecisionOption = Annotated[str, typer.Option("--precision", help="fp32, bf16 or fp16: autocast of the model's "
                                              "forward passes (the ranking stays fp32). Default fp32.")]

#: ``--compile`` of the commands that run a model outside a training run (eval, attack)
CompileOption = Annotated[bool, typer.Option("--compile", help="torch.compile the model's forward (the first "
                                             "batches wait for the compile, whose time is printed).")]

SET_HELP = ("Any run-configuration field, SECTION.FIELD=VALUE (repeatable), e.g. --set optim.lr_step=20 or "
            "--set federation.method_options.mu=0.1; the value is parsed by the field's type.")


def option_default(name: str) -> Any:
    """The default of option ``name``: its field's dataclass default (``None`` for a list or mapping field)."""
    section, field = CONFIG_OPTIONS[name].path.split(".")
    from privreid.config import SECTIONS

    (f,) = [f for f in dataclasses.fields(SECTIONS[section]) if f.name == field]
    return None if f.default is dataclasses.MISSING else f.default


def option_type(name: str) -> Any:
    """The command-line type of option ``name``: the entry's, else its field's (``X | None`` as ``Optional[X]``)."""
    o = CONFIG_OPTIONS[name]
    if o.cli_type is not None:
        return o.cli_type
    section, field = o.path.split(".")
    return _optional(field_types(section)[field])


def _optional(tp: Any) -> Any:
    """A field type as typer reads it: ``X | None`` as ``Optional[X]``."""
    args = typing.get_args(tp)
    return Optional[[a for a in args if a is not type(None)][0]] if type(None) in args else tp


def config_options(names: tuple[str, ...], **helps: str) -> Callable:
    """Decorator: insert the typer options ``names`` (then ``--set``) after the command's first parameter, the
    context, grouped by their help panel in the order of :data:`PANELS`.

    The decorated function takes them as ``**options``; ``helps`` replaces an
    option's help text where the command gives it another meaning.
    """
    unknown = set(helps) - set(names)
    assert not unknown, unknown
    added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=option_type(n), default=typer.Option(
        option_default(n), *o.decls, help=helps.get(n, o.help), rich_help_panel=o.panel,
        click_type=click.Choice(o.choices) if o.choices else o.click_type))
        for n, o in sorted(((n, CONFIG_OPTIONS[n]) for n in names), key=lambda item: PANELS.index(item[1].panel))]
    added.append(inspect.Parameter("sets", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[list[str]],
                                   default=typer.Option(None, "--set", help=SET_HELP, rich_help_panel=TRAINING)))

    def decorate(fn: Callable) -> Callable:
        fn = insert_options(fn, next(iter(inspect.signature(fn).parameters)), added)
        fn.config_option_names = names
        return fn

    return decorate


def settings_options(settings: type, after: str, flags: dict[str, str] | None = None,
                     choices: dict[str, tuple[str, ...]] | None = None, **helps: str) -> Callable:
    """Decorator: insert one typer option per field of the dataclass ``settings`` named in ``helps`` (in that
    order, with that help text) after the command's parameter ``after``; ``flags`` names the flag of a field
    whose flag is not its name (``{"attack": "--method"}``), ``choices`` the values of a field that takes a few.

    The option's default and type are the field's, so the dataclass holds the
    only default; the decorated function takes the options as ``**options``
    (``settings(**options)`` builds the settings).
    """
    fields = {f.name: f for f in dataclasses.fields(settings)}
    types = typing.get_type_hints(settings)
    flags, choices = flags or {}, choices or {}
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=_optional(types[name]),
                               default=typer.Option(fields[name].default, *flags.get(name, "").split(), help=text,
                                                    click_type=click.Choice(choices[name]) if name in choices
                                                    else None))
             for name, text in helps.items()]
    return lambda fn: insert_options(fn, after, added)


def insert_options(fn: Callable, after: str, added: list[inspect.Parameter]) -> Callable:
    """Give ``fn`` (which takes ``**options``) the signature typer reads: its own parameters with ``added``
    inserted after the parameter ``after``; every parameter but the first becomes keyword-only.  The own
    parameters' annotations are resolved (typer reads a set signature as it is, so an ``Annotated`` option such as
    :data:`~.common.DeviceOption` would otherwise lose its help and type)."""
    hints = typing.get_type_hints(fn, include_extras=True)
    own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in inspect.signature(fn).parameters.values()
           if p.kind is not p.VAR_KEYWORD]
    at = [p.name for p in own].index(after) + 1
    params = [p if p.kind is p.VAR_POSITIONAL or i == 0 else p.replace(kind=p.KEYWORD_ONLY)
              for i, p in enumerate(own[:at] + added + own[at:])]
    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {**hints, **{p.name: p.annotation for p in added}}
    return fn


def run_config(params: dict, names: tuple[str, ...]) -> RunConfig:
    """The run configuration of a command's ``params`` (after the preset): options ``names``, then ``--set``.

    Fields without an option keep their dataclass defaults; the result is not validated yet.
    """
    config = RunConfig()
    for name in names:
        o = CONFIG_OPTIONS[name]
        section, field = o.path.split(".")
        value = params[name]
        setattr(getattr(config, section), field, o.to_config(value) if o.to_config else value)
    return apply_sets(config, params.get("sets") or [])

