"""Issue 28.4, one way to extend: every registry is a :class:`privreid.registry.Registry` with one behaviour.

For each registry (methods, defenses, dataset formats, model transforms,
inversion attacks, threat models, retrieval attacks, malicious clients,
membership attacks) an entry registered
from this test module is usable where the built-ins are and listed with its
origin; a taken name is a one-line ConfigError; ``unregister`` removes it and
refuses an unknown name with the same error as ``get``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from privreid.inversion import threat_models
from privreid.inversion.optimise import IDLG
from privreid.inversion.settings import INVERSION_ATTACKS, InversionSettings
from privreid.inversion.threat_models import FullGradient
from privreid.data.formats import FORMATS, DatasetFormat, format_choices, get_format
from privreid.defenses.registry import DEFENSES, Defense, available_defenses
from privreid.errors import ConfigError
from privreid.federated.policy import CLASSIFIER_LOCAL
from privreid.federated.registry import METHODS, Method
from privreid.federated.strategy import DataVolumeAverage
from privreid.auditing.membership_attacks import MEMBERSHIP_ATTACKS, FeatureAttack, resolve_attacks
from privreid.malicious_clients import MALICIOUS_CLIENTS, available_malicious_clients, get_malicious_client
from privreid.malicious_clients.sign_flip import SignFlip
from privreid.models.transforms import TRANSFORMS, ModelTransform, make_transform
from privreid.registry import BUILT_IN, Registry

from badinput import BadInput, check_refused
from test_bad_inputs_cli import TINY

#: the origin of what this module registers: its top-level package (pytest imports it as a top-level module)
HERE = __name__.partition(".")[0]


# --------------------------------------------------------------------------- one new entry per registry
@dataclasses.dataclass(frozen=True)
class ToyTransform(ModelTransform):
    name = "toy_identity"

    def apply(self, model):
        return model


class ToyDefense(Defense):
    name = "toy-defense"
    summary = "does nothing (registry contract test)"

    def wrap(self, method, config):
        return method


def toy_method(name: str = "toy-method", **fields) -> Method:
    from privreid.federated.client import SupervisedUpdate

    return Method(name=name, summary="FedAvg again (registry contract test)", policy=CLASSIFIER_LOCAL,
                  make_client_update=SupervisedUpdate, make_strategy=lambda config, model_config: DataVolumeAverage(),
                  needs_per_client_uploads=False, **fields)


def toy_format() -> DatasetFormat:
    market = get_format("market1501")[0]
    return dataclasses.replace(market, name="toy-format", family="user", detect=None, loose_detect=None)


class ToyInversion(IDLG):
    name, summary, distance = "toy-idlg", "iDLG with cosine matching", "cosine"


class ToyThreat(FullGradient):
    name, summary = "toy-threat", "the full gradient again"


class ToyAdversary(SignFlip):
    name, summary = "toy-adversary", "sign flipping again (registry contract test)"


class ToyMembership(FeatureAttack):
    name = "toy-membership"


def _retrieval():
    from privreid.retrieval_attacks import feature_attacks

    class ToyBIM(feature_attacks.FeatureBIM):
        name, label = "toy-bim", "ToyBIM"

    return feature_attacks.RETRIEVAL_ATTACKS, ToyBIM


#: registry id -> (the registry, a new entry, what the registry's users see: a check that the entry is usable)
def cases():
    return {
        "method": (lambda: METHODS, toy_method, _method_is_usable),
        "defense": (lambda: DEFENSES, ToyDefense, _defense_is_usable),
        "format": (lambda: FORMATS, toy_format, _format_is_usable),
        "transform": (lambda: TRANSFORMS, lambda: ToyTransform, _transform_is_usable),
        "inversion": (lambda: INVERSION_ATTACKS, ToyInversion, _inversion_is_usable),
        "threat": (lambda: threat_models.THREATS, ToyThreat, _threat_is_usable),
        "retrieval": (lambda: _retrieval()[0], lambda: _retrieval()[1], _retrieval_is_usable),
        "malicious": (lambda: MALICIOUS_CLIENTS, ToyAdversary, _malicious_is_usable),
        "membership": (lambda: MEMBERSHIP_ATTACKS, ToyMembership, _membership_is_usable),
    }


def _method_is_usable(entry):
    from typer.testing import CliRunner

    from privreid.cli import app
    from privreid.composition import build_method

    from conftest import tiny_config

    assert build_method(tiny_config("synth", method=entry.name)).name == entry.name
    listing = CliRunner().invoke(app, ["methods"])
    assert listing.exit_code == 0 and f"{entry.name} " in listing.output


def _defense_is_usable(entry):
    from typer.testing import CliRunner

    from privreid.cli import app

    assert entry.name in available_defenses()
    listing = CliRunner().invoke(app, ["methods"])
    assert f"{entry.name}: yes" in listing.output  # its row of the support matrix


def _format_is_usable(entry):
    assert get_format(entry.name) == (entry, None) and entry.name in format_choices()


def _transform_is_usable(entry):
    assert isinstance(make_transform(entry.name), entry)
    assert list(TRANSFORMS)[-1] == entry.name  # applied after the built-ins


def _inversion_is_usable(entry):
    assert InversionSettings(attack=entry.name).distance == "cosine"
    assert INVERSION_ATTACKS[entry.name] is entry


def _threat_is_usable(entry):
    assert threat_models.THREATS[entry.name] is entry


def _retrieval_is_usable(entry):
    from privreid.retrieval_attacks import retrieval_attack_names
    from privreid.retrieval_attacks.retrieval import attack_label, resolve_methods

    assert entry.name in resolve_methods("all") and entry.name in retrieval_attack_names()
    assert attack_label(entry.name) == entry.label


def _malicious_is_usable(entry):
    from privreid.config import RobustnessConfig, RunConfig
    from privreid.malicious_clients import settings_of

    assert get_malicious_client(entry.name) is entry and entry.name in available_malicious_clients()
    config = RunConfig(robustness=RobustnessConfig(adversary={"name": entry.name}))
    assert settings_of(config) == (entry, {**entry.options, "malicious": 1})


def _membership_is_usable(entry):
    assert resolve_attacks([entry.name]) == [entry] and resolve_attacks(["all"])[-1] is entry


@pytest.fixture(params=list(cases()))
def case(request):
    if request.param == "retrieval":
        pytest.importorskip("torchattacks")
    get_registry, make_entry, usable = cases()[request.param]
    registry = get_registry()
    with registry.restoring():
        yield registry, make_entry(), usable


def test_a_new_entry_is_one_registration_usable_and_listed_with_its_origin(case):
    registry, entry, usable = case
    builtins = registry.names()
    assert builtins and all(registry.origin(name) == BUILT_IN for name in builtins)
    assert registry.register(entry) is entry
    name = entry.name
    assert registry.names() == [*builtins, name] and registry.get(name) is entry and registry[name] is entry
    assert registry.origin(name) == HERE
    usable(entry)


def test_a_taken_name_is_one_line_and_unregister_behaves_the_same_everywhere(case):
    registry, entry, _ = case
    registry.register(entry)
    with pytest.raises(ConfigError, match=f"^{registry.kind} '{entry.name}' is already registered$"):
        registry.register(entry)
    registry.unregister(entry.name)
    assert entry.name not in registry and entry.name not in registry.names()
    for refuse in (registry.get, registry.unregister, registry.origin):
        with pytest.raises(ConfigError) as refused:
            refuse(entry.name)
        assert str(refused.value) == f"unknown {registry.kind} '{entry.name}'; choose one of: " \
                                     f"{', '.join(registry.names())}"
        assert "\n" not in str(refused.value)


# --------------------------------------------------------------------------- the generic registry itself
class Named:
    def __init__(self, name):
        self.name = name


def test_builtins_load_once_on_first_use_and_count_as_built_in():
    loads = []

    def builtins():
        loads.append(1)
        return [Named("a"), Named("b")]

    registry = Registry("widget", builtins=builtins)
    assert not loads  # nothing happens until the registry is used
    registry.register(Named("c"))
    assert loads == [1] and registry.names() == ["a", "b", "c"] and len(registry) == 3
    assert [registry.origin(n) for n in registry] == [BUILT_IN, BUILT_IN, HERE]
    assert registry.names() and loads == [1]


def test_replace_and_restoring_and_a_check_run_before_the_name():
    def positive(entry):
        if getattr(entry, "size", 1) <= 0:
            raise ConfigError("a widget needs a positive size")

    registry = Registry("widget", check=positive)
    first = registry.register(Named("a"))
    with registry.restoring():
        second = registry.register(Named("a"), replace=True)
        registry.register(Named("b"))
        assert registry["a"] is second and registry.names() == ["a", "b"]
    assert registry["a"] is first and registry.names() == ["a"]
    bad = Named("")
    bad.size = 0
    with pytest.raises(ConfigError, match="positive size"):
        registry.register(bad)
    with pytest.raises(ConfigError, match="^a widget needs a name"):
        registry.register(Named(""))
    with pytest.raises(ConfigError, match="^unknown widget 'z'; choose one of: a$"):
        registry.get("z")


# --------------------------------------------------------------------------- DP-SGD support is the method's
def test_dp_sgd_refuses_a_method_that_does_not_declare_it_in_one_line(tiny_synth, tmp_path):
    with METHODS.restoring():
        METHODS.register(toy_method("toy-undeclared"))
        check_refused(BadInput("undeclared", ("train", "--data", "{synth}", *TINY, "--method", "toy-undeclared",
                                              "--dp-sgd", "--noise-multiplier", "1", "--out", "{tmp}/run"),
                               keep=("run",), says="--dp-sgd cannot train method 'toy-undeclared'"),
                      tmp_path, synth=tiny_synth)


def test_every_builtin_method_declares_dp_sgd_support_and_the_defense_enforces_it(tiny_synth):
    from privreid.defenses.dp_sgd.plugin import DPSGD

    from conftest import tiny_config

    for name in METHODS.names():
        method = METHODS.get(name)
        assert method.dp_sgd_support and method.dp_sgd_support.startswith(("yes", "no (")), name
        cfg = tiny_config(tiny_synth, method=name, dp_sgd=True, noise_multiplier=1.0)
        if method.dp_sgd_support.startswith("no"):
            with pytest.raises(ConfigError, match=f"--dp-sgd cannot train method '{name}': "):
                DPSGD().wrap(method, cfg)
        else:
            assert "group_norm" in DPSGD().wrap(method, cfg).model_transforms_for(cfg)


# --------------------------------------------------------------------------- retrieval attacks registered late
def test_a_retrieval_attack_registered_after_import_runs_with_progress(tiny_synth):
    """Issue 28.4: the Table IX labels were copied at import, so a later attack raised KeyError with progress on."""
    pytest.importorskip("torchattacks")
    from privreid.retrieval_attacks.retrieval import evaluate_under_attack
    from privreid.data.catalog import resolve_datasets
    from privreid.data.types import TestSet
    from privreid.models import build_model

    attacks, toy = _retrieval()
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=5, feat_dim=16).eval()
    domain = resolve_datasets([str(tiny_synth)])["synthA"]
    testset = TestSet("A", [s for s in domain.train if s[2] == 0][:4], [s for s in domain.train if s[2] != 0][:8])
    with attacks.restoring():
        attacks.register(toy)
        result = evaluate_under_attack(model, testset, method="toy-bim", height=32, width=16, eps=8 / 255, steps=1,
                                       batch_size=4, seed=0, progress=True)
    assert result.record()["attack"] == "toy-bim"
