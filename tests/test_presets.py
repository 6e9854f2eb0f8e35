"""YAML presets: typed like command-line flags (issue 11, bug 5), and the paper presets in configs/."""

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from privreid.cli import app
from privreid.commands.sweep import base_config
from privreid.deviations import recipe_deviations
from privreid.composition import method_of

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PAPER_PRESETS = sorted(CONFIGS.glob("*-paper.yaml"))


def preset(tmp_path, text: str) -> Path:
    path = tmp_path / "preset.yaml"
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- typed parsing (bug 5)
@pytest.mark.parametrize("text,field,value", [
    ("lr-backbone: 5e-3\n", ("optim", "lr_backbone"), 0.005),  # a string to PyYAML: no exponent sign
    ('dp-sgd: "false"\n', ("privacy", "dp_sgd"), False),  # a non-empty string is truthy in Python
    ("dp-sgd: no\n", ("privacy", "dp_sgd"), False),
    ("data: synth\n", ("data", "roots"), ["synth"]),
    ("test-domains: 2019\n", ("data", "test_domains"), ["2019"]),  # a number where a name is expected
    ("opt: {mu: 0.01}\n", ("federation", "method_options"), {"mu": 0.01}),
    ("pretrained: null\n", ("model", "pretrained"), None),
])
def test_preset_values_are_typed_like_flags(tmp_path, text, field, value):
    config = base_config(["--config", str(preset(tmp_path, text))])
    assert getattr(getattr(config, field[0]), field[1]) == value
    assert type(getattr(getattr(config, field[0]), field[1])) is type(value)


BAD = [
    ('rounds: "abc"\n', "rounds: 'abc' is not a valid integer"),
    ("rounds: 2.7\n", "rounds: '2.7' is not a valid integer"),
    ("rounds: '7'\n", "rounds: '7' is not a valid integer (quoted"),  # an int option takes a YAML int (issue 26)
    ("rounds: {a: 1}\n", "rounds: expected a single value"),
    ("lr-head: fast\n", "lr-head: 'fast' is not a valid float"),
    ("dp-sgd: maybe\n", "dp-sgd: 'maybe' is not a valid boolean"),
    ("rounds: [1, 2]\n", "rounds: expected a single value"),
    ("rounds: null\n", "rounds: a value is required"),
    ("data: 5\n", "dataset directory not found: 5"),
]


@pytest.mark.parametrize("text,message", BAD, ids=[b[0].strip() for b in BAD])
def test_bad_preset_values_give_one_line_errors(tmp_path, text, message):
    path = preset(tmp_path, text)
    result = CliRunner().invoke(app, ["train", "--config", str(path), "--out", str(tmp_path / "o"), "--quiet"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and message in result.output, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()  # nothing written


@pytest.mark.parametrize("command", [
    ["flower", "run", "--insecure"],
    ["sweep", "--param", "beta", "--values", "0,0.1"],
])
def test_flower_run_and_sweep_type_their_presets(tmp_path, command):
    path = preset(tmp_path, 'rounds: "abc"\n')
    result = CliRunner().invoke(app, [*command, "--out", str(tmp_path / "o"), "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert "rounds: 'abc' is not a valid integer" in result.output and "Traceback" not in result.output


def test_flags_override_a_preset_and_new_recipe_flags_reach_the_config(tmp_path):
    path = preset(tmp_path, "label-smoothing: 0.0\nrounds: 9\n")
    config = base_config(["--config", str(path), "--rounds", "3", "--dropout", "0.5", "--lr-neck", "0.05",
                          "--report-best", "3", "--eval-flip"])
    assert config.federation.rounds == 3 and config.optim.label_smoothing == 0.0
    assert config.model.dropout == 0.5 and config.optim.lr_neck == 0.05
    assert config.evaluation.report_best == 3 and config.evaluation.flip is True
    default = base_config([])
    assert (default.optim.label_smoothing, default.model.dropout, default.optim.lr_neck, default.evaluation.report_best,
            default.optim.triplet_weight) == (0.1, 0.0, None, 1, None)


# --------------------------------------------------------------------------- the paper presets
DOCUMENTED = re.compile(r"^#   ([a-z][a-z_.-]*): (\S+)\s{2,}(\S.*)$")


def documented(path: Path) -> dict:
    """``key -> (value, source)`` from the comment block at the top of a preset."""
    out = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        match = DOCUMENTED.match(line)
        if match:
            key, value, source = match.groups()
            out[key] = (yaml.safe_load(f"v: {value}")["v"], source)
    return out


def flat(values: dict) -> dict:
    """The preset's values, ``opt`` flattened to ``opt.KEY``."""
    out = {k: v for k, v in values.items() if k != "opt"}
    out.update({f"opt.{k}": v for k, v in (values.get("opt") or {}).items()})
    return out


@pytest.mark.parametrize("path", PAPER_PRESETS, ids=[p.stem for p in PAPER_PRESETS])
def test_paper_preset_documents_every_value_with_its_source(path):
    values, docs = flat(yaml.safe_load(path.read_text())), documented(path)
    assert set(docs) == set(values), f"undocumented: {set(values) - set(docs)}; stale: {set(docs) - set(values)}"
    for key, (value, source) in docs.items():
        assert values[key] == value and type(values[key]) is type(value), key
        assert re.search(r"paper 00\d|reference code|privreid", source), f"{key}: no source"


@pytest.mark.parametrize("path", PAPER_PRESETS, ids=[p.stem for p in PAPER_PRESETS])
def test_paper_preset_validates_and_sets_its_papers_recipe(path):
    config = base_config(["--config", str(path)]).validate()
    assert config.optim.label_smoothing == 0.0  # every paper uses plain cross-entropy
    assert recipe_deviations(config, method_of(config)) == []  # the values of privreid.deviations.PAPER_RECIPES


def test_fedpav_preset_is_the_reference_recipe():
    config = base_config(["--config", str(CONFIGS / "fedpav-paper.yaml")])
    m, o, e = config.model, config.optim, config.evaluation
    assert (m.arch, m.pretrained, m.last_stride, m.dropout, m.neck, m.feat_dim) == ("resnet50", "imagenet", 2, 0.5,
                                                                                  "linear", 512)
    assert (o.random_erasing, o.label_smoothing, o.triplet_weight) == (0.0, 0.0, 0.0)
    assert (o.lr_backbone, o.lr_head, o.lr_neck) == (0.005, 0.05, 0.05)  # the bottleneck at the classifier's rate
    assert (e.report_best, e.every, config.federation.rounds, e.flip) == (3, 10, 300, True)


def test_dppt_preset_shares_the_classifier_and_fedarks_keeps_its_triplet():
    dppt = base_config(["--config", str(CONFIGS / "dppt-sysu-paper.yaml")])
    assert dppt.federation.method_options["shared_classifier"] is True and dppt.data.protocol == "ci"
    assert (dppt.optim.lr_backbone, dppt.optim.lr_neck, dppt.optim.lr_head) == (0.02, 0.2, 0.2)
    fedarks = base_config(["--config", str(CONFIGS / "fedarks-paper.yaml")])
    assert fedarks.optim.triplet_weight == 1.0
