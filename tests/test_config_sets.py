"""One source of truth for the run configuration: generated options, --set, method options (issue 12)."""

import dataclasses
import inspect

import pytest
import typer
from typer.testing import CliRunner

from privreid.cli import app
from privreid.commands.common import params_with_preset
from privreid.commands.options import CONFIG_OPTIONS
from privreid.commands.train import train_command, train_config
from privreid.config import FederationConfig, RunConfig
from privreid.config.sets import apply_sets
from privreid.config.values import parse_bool
from privreid.errors import ConfigError
from privreid.federated.method_options import parse_options
from privreid.federated.methods.dppt import DPPTSettings
from privreid.federated.methods.ska import SKAOptions
from privreid.federated.registry import get_method

runner = CliRunner()

#: every long flag `privreid train --help` listed before issue 12 (the baseline), SKA's three ablation flags aside
BASELINE_TRAIN_FLAGS = (
    "--config --method --data --format --protocol --train-domains --test-domains --num-clients --rounds "
    "--local-epochs --batch-size --optimizer --lr-backbone --lr-head --lr-neck --lr-step --lr-schedule --lr-gamma "
    "--client-fraction --triplet-weight --label-smoothing --random-erasing --dropout --max-steps --eval-every "
    "--eval-flip --eval-metric --eval-ap --report-best --opt --beta --beta-mode --dp-sgd --client-dp --noise-multiplier --max-grad-norm "
    "--clip --target-epsilon --delta --secure-aggregation --secagg-shares --secagg-threshold --secagg-clip "
    "--secagg-quantization --secagg-max-weight --arch --neck --feat-dim --last-stride --pretrained --weights "
    "--height --width --audit-holdout --seed --device --workers --precision --compile --out --overwrite --no-overwrite --resume "
    "--no-resume --quiet --no-quiet --logger --dry-run --json --parallel-clients --adversary --malicious-clients").split()


def _train_params(args: list[str]) -> dict:
    single = typer.Typer()
    single.command("train")(train_command)
    command = typer.main.get_command(single)
    ctx = command.make_context("train", list(args))
    return params_with_preset(ctx, ctx.params["config_file"])


def config_of(*args: str) -> RunConfig:
    return train_config(_train_params([str(a) for a in args]))


# --------------------------------------------------------------------------- generated options
def test_train_options_are_the_baseline_ones_plus_set():
    command = typer.main.get_command(app).commands["train"]
    flags = [o for p in command.params for o in p.opts + p.secondary_opts if o.startswith("--")]
    assert sorted(flags) == sorted(BASELINE_TRAIN_FLAGS + ["--set"])
    assert not {"--no-an", "--no-lsn", "--no-dual"} & set(flags)
    help_text = runner.invoke(app, ["train", "--help"], terminal_width=400).output
    assert "--set" in help_text and "--no-an" not in help_text


def test_every_field_option_shows_its_dataclass_default_and_help():
    command = typer.main.get_command(app).commands["train"]
    params = {p.name: p for p in command.params}
    sections = RunConfig()
    for name, option in CONFIG_OPTIONS.items():
        section, field = option.path.split(".")
        default = getattr(getattr(sections, section), field)
        expected = None if isinstance(default, (list, dict)) else default
        assert params[name].default == expected, name
        assert params[name].help == option.help, name
    assert params["lr_backbone"].default == 0.005 and params["secagg_quantization"].default == 2 ** 22


def test_no_options_give_the_default_config():
    assert config_of().to_dict() == RunConfig().to_dict()


def test_options_reach_their_fields():
    c = config_of("--method", "fedprox", "--max-steps", "3", "--workers", "2", "--format", "market1501",
                  "--train-domains", "a, b", "--pretrained", "none", "--weights", "w.pt", "--opt", "mu=0.5",
                  "--eval-flip", "--data", "synth", "--data", "x")
    assert (c.federation.method, c.optim.max_steps_per_epoch, c.runtime.num_workers) == ("fedprox", 3, 2)
    assert (c.data.format, c.data.train_domains, c.data.roots) == ("market1501", ["a", "b"], ["synth", "x"])
    assert (c.model.pretrained, c.model.weights, c.federation.method_options) == (None, "w.pt", {"mu": 0.5})
    assert c.evaluation.flip is True


# --------------------------------------------------------------------------- --set
@pytest.mark.parametrize("pair, section, field, value", [
    ("data.height=48", "data", "height", 48),
    ("data.test_domains=a,b", "data", "test_domains", ["a", "b"]),
    ("data.test_domains=[\"a\"]", "data", "test_domains", ["a"]),
    ("data.num_clients=none", "data", "num_clients", None),
    ("data.audit_holdout=0.25", "data", "audit_holdout", 0.25),
    ("model.arch=resnet34", "model", "arch", "resnet34"),
    ("model.pretrained=null", "model", "pretrained", None),
    ("model.dropout=1e-1", "model", "dropout", 0.1),
    ("optim.lr_step=20", "optim", "lr_step", 20),
    ("optim.momentum=0.5", "optim", "momentum", 0.5),
    ("optim.lr_neck=2", "optim", "lr_neck", 2.0),
    ("privacy.dp_sgd=yes", "privacy", "dp_sgd", True),
    ("evaluation.flip=0", "evaluation", "flip", False),
    ("federation.method_options.mu=0.1", "federation", "method_options", {"mu": 0.1}),
    ("federation.method_options.public_data=/x/y", "federation", "method_options", {"public_data": "/x/y"}),
    ("federation.method_options={\"an\": false}", "federation", "method_options", {"an": False}),
])
def test_set_parses_by_the_field_type(pair, section, field, value):
    c = apply_sets(RunConfig(), [pair])
    got = getattr(getattr(c, section), field)
    assert got == value and type(got) is type(value)
    assert RunConfig.from_dict(c.to_dict()) == c  # plain data: round trips through a checkpoint's dict


def test_set_paths_into_mappings_nest_and_keep_other_keys():
    c = apply_sets(RunConfig(federation=FederationConfig(method_options={"mu": 1})),
                   ["federation.method_options.tau=0.5", "federation.method_options.deep.a.b=true"])
    assert c.federation.method_options == {"mu": 1, "tau": 0.5, "deep": {"a": {"b": True}}}


def test_set_applies_after_flags_and_later_wins():
    c = config_of("--rounds", "3", "--set", "federation.rounds=4", "--set", "federation.rounds=5", "--set", "runtime.seed=7")
    assert (c.federation.rounds, c.runtime.seed) == (5, 7)


@pytest.mark.parametrize("pair, message", [
    ("federation.rounds", "expects SECTION.FIELD=VALUE"),
    ("rounds=3", "expects SECTION.FIELD=VALUE"),
    ("train.lr=1", "no section 'train' (sections: data, model, federation, optim, privacy, robustness, evaluation, "
                   "runtime)"),
    ("optim.lr=1", "optim has no field 'lr' (its fields: optimizer, local_epochs,"),
    ("federation.rounds=2.5", "federation.rounds: expected an integer, got '2.5'"),
    ("federation.rounds=true", "expected an integer"),
    ("privacy.dp_sgd=maybe", "expected true or false"),
    ("optim.lr_head=fast", "expected a number"),
    ("federation.rounds.x=1", "federation.rounds is not a mapping"),
    ("federation.method_options=[1]", "expected a JSON object"),
])
def test_bad_set_is_one_config_error(pair, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        apply_sets(RunConfig(), [pair])
    assert "\n" not in str(err.value)


def test_bad_set_on_the_cli_is_one_line_and_exit_2(tmp_path):
    for command in (["train"], ["flower", "run", "--insecure"]):
        res = runner.invoke(app, [*command, "--set", "optim.nope=1", "--out", str(tmp_path / "o")])
        assert res.exit_code == 2, res.output
        assert res.output.strip().splitlines() == [res.output.strip()]
        assert res.output.startswith("error: --set optim.nope: optim has no field 'nope'")
        assert not (tmp_path / "o").exists()


def test_preset_takes_set(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("rounds: 3\nset: [optim.momentum=0.8, federation.method_options.mu=0.2]\n")
    c = config_of("--config", str(preset), "--method", "fedprox")
    assert (c.federation.rounds, c.optim.momentum, c.federation.method_options) == (3, 0.8, {"mu": 0.2})


# --------------------------------------------------------------------------- method options
def test_one_boolean_rule():
    for word in (True, 1, "true", "TRUE", "yes", "1"):
        assert parse_bool(word) is True
    for word in (False, 0, "false", "No", "0"):
        assert parse_bool(word) is False
    for bad in ("maybe", 2, "", None, 0.5):
        with pytest.raises(ValueError):
            parse_bool(bad)


def test_method_options_are_typed_from_strings_and_json():
    s = parse_options(DPPTSettings, {"mrb": "no", "topk": "3", "lambda_mrb": 2, "ca": "gray", "circle": 0}, "dppt")
    assert (s.mrb, s.topk, s.lambda_mrb, s.ca, s.circle) == (False, 3, 2.0, "gray", False)
    assert type(s.lambda_mrb) is float and type(s.topk) is int
    assert parse_options(DPPTSettings, {}, "dppt") == DPPTSettings()


@pytest.mark.parametrize("values, message", [
    ({"nope": 1}, "method 'dppt' has no option nope (its options: base, ca, ca_p,"),
    ({"topk": 2.5}, "dppt option topk must be an integer, got 2.5"),
    ({"topk": "x"}, "dppt option topk must be an integer, got 'x'"),
    ({"mrb": "maybe"}, "dppt option mrb must be true or false"),
    ({"lambda_mrb": True}, "dppt option lambda_mrb must be a number, got True"),
])
def test_bad_method_options_are_one_config_error(values, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as err:
        parse_options(DPPTSettings, values, "dppt")
    assert "\n" not in str(err.value)


def test_every_method_declares_frozen_options():
    from privreid.federated.registry import available_methods

    for name in available_methods():
        options = get_method(name).options
        assert dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen, name
        assert get_method(name).settings(RunConfig(federation=FederationConfig(method=name))) == options()


def test_unknown_method_option_on_the_cli_is_one_line_and_exit_2(tmp_path):
    res = runner.invoke(app, ["train", "--method", "fedprox", "--opt", "nu=1", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and res.output.startswith("error: method 'fedprox' has no option nu"), res.output


# --------------------------------------------------------------------------- SKA's ablations
#: what `privreid train --method ska --no-an --no-lsn --no-dual` recorded before the flags became options
#: (computed once on the baseline code: TrainConfig.method_options)
OLD_FLAGS_METHOD_OPTIONS = {"an": False, "lsn": False, "dual": False}


def test_ska_ablation_options_give_the_config_the_old_flags_gave(tmp_path):
    via_options = config_of("--method", "ska", "--opt", "an=false", "--opt", "lsn=false", "--opt", "dual=false")
    assert via_options.federation.method_options == OLD_FLAGS_METHOD_OPTIONS
    assert get_method("ska").settings(via_options) == SKAOptions(an=False, lsn=False, dual=False)


def test_old_ska_preset_keys_are_refused_in_one_line(tmp_path):
    old_preset = tmp_path / "config.yaml"  # a run's config.yaml written before the flags became options
    old_preset.write_text("method: ska\nno-an: true\n")
    res = runner.invoke(app, ["train", "--config", str(old_preset), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and res.output == f"error: {old_preset}: unknown option 'no-an'\n", res.output


def test_ska_flags_are_gone():
    res = runner.invoke(app, ["train", "--method", "ska", "--no-an"])
    assert res.exit_code == 2 and "No such option" in res.output and "--no-an" in res.output, res.output


@dataclasses.dataclass
class _ToySettings:
    rate: float = 0.25
    name: str | None = None
    unused: int = 7


def test_settings_options_take_the_dataclass_defaults_and_types_and_insert_after_the_named_parameter():
    from privreid.commands.options import settings_options

    seen = {}

    @settings_options(_ToySettings, "first", rate="The rate.", name="A name.")
    def command(first: int = typer.Option(1), last: int = typer.Option(2), **settings):
        seen.update(first=first, last=last, settings=_ToySettings(**settings))

    params = inspect.signature(command).parameters
    assert list(params) == ["first", "rate", "name", "last"]  # only the named fields, in the helps' order
    assert (params["rate"].default.default, params["name"].default.default) == (0.25, None)
    toy = typer.Typer()
    toy.command()(command)
    assert runner.invoke(toy, []).exit_code == 0 and seen["settings"] == _ToySettings()
    result = runner.invoke(toy, ["--rate", "0.5", "--name", "x", "--last", "3"])
    assert result.exit_code == 0, result.output
    assert seen == {"first": 1, "last": 3, "settings": _ToySettings(rate=0.5, name="x")}
    assert runner.invoke(toy, ["--rate", "fast"]).exit_code == 2  # typed by the field: float


def test_invert_attack_options_default_to_the_inversion_settings():
    from privreid.inversion.settings import InversionSettings
    from privreid.commands.invert import invert_command

    params = inspect.signature(invert_command).parameters
    defaults = {f.name: params[f.name].default.default for f in dataclasses.fields(InversionSettings)}
    assert defaults == dataclasses.asdict(InversionSettings())


def test_option_path_names_the_field_each_flag_sets():
    """``config.option_path`` (presets, deviations) and the CLI's option table agree on every flag's field."""
    from privreid.config import option_path

    for name, option in CONFIG_OPTIONS.items():
        flag = option.decls[0] if option.decls else "--" + name.replace("_", "-")
        assert option_path(flag) == option_path(flag.lstrip("-")) == option.path, flag
    assert option_path("--no-such-flag") is None
