"""Bad inputs refused by argument checking alone: one ``error:`` line, exit 2, nothing written (tests/badinput.py).

The campaign suite of issue 26 for arguments: the parse errors of every
command and subcommand, generated from the command tree itself (an unknown
option, a number option given text, a path option given an empty string, a
missing required option), then the value errors a flag, ``--set`` or a YAML
preset can carry (non-finite, negative, huge numbers, wrong YAML types,
unknown choices, missing files, a directory where a file is expected).
Every case is refused before training starts; the directories it names stay
byte-for-byte as they were (or absent).
"""

from __future__ import annotations

import click
import pytest
import typer.main

from badinput import BadInput, check_refused
from privreid.cli import app

#: the tiny settings of every training case (refused during validation, so they never train)
TINY = ("--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--rounds", "2", "--device", "cpu", "--quiet")
TRAIN = ("train", "--data", "{synth}", *TINY)


def leaf_commands() -> dict[tuple[str, ...], click.Command]:
    """Every command and subcommand of ``privreid`` (``data synth``, ``flower run`` ...) by its words."""
    out: dict[tuple[str, ...], click.Command] = {}

    def walk(command: click.Command, words: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, (*words, name))
        else:
            out[words] = command

    walk(typer.main.get_command(app), ())
    return out


COMMANDS = leaf_commands()


def _out(command: click.Command) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``--out {tmp}/out`` for a command that writes one (kept unchanged), else nothing."""
    if any("--out" in getattr(p, "opts", ()) for p in command.params):
        return ("--out", "{tmp}/out"), ("out",)
    return (), ()


def parse_cases() -> list[BadInput]:
    """For every command: an unknown option; for each of its number options, text; for each path option, '';
    for its seed, 2**64 and -1."""
    cases = []
    for words, command in COMMANDS.items():
        name = "-".join(words)
        out, keep = _out(command)
        # sweep passes options it does not know to train, so it names its own missing options first
        cases.append(BadInput(f"{name}-unknown-option", (*words, "--no-such-option", "1", *out), keep=keep,
                              says="" if command.context_settings.get("ignore_unknown_options") else "no such option"))
        for p in command.params:
            if not isinstance(p, click.Option) or p.is_flag:
                continue
            flag = p.opts[0]
            rest = () if flag == "--out" else out
            if isinstance(p.type, click.types.IntParamType):
                cases.append(BadInput(f"{name}{flag}-not-an-integer", (*words, flag, "1.5", *rest), keep=keep,
                                      says="not a valid integer"))
            if p.name == "seed":  # every command's seed: what numpy's and torch's generators take
                cases += [BadInput(f"{name}{flag}-{v}", (*words, flag, v, *rest), keep=keep,
                                   says="seed must be in 0..4294967295") for v in (str(2**64), "-1")]
            elif isinstance(p.type, click.types.FloatParamType):
                cases.append(BadInput(f"{name}{flag}-not-a-number", (*words, flag, "fast", *rest), keep=keep,
                                      says="not a valid float"))
            elif isinstance(p.type, click.Path):
                cases.append(BadInput(f"{name}{flag}-empty-path", (*words, flag, "", *rest), keep=keep,
                                      says="empty path"))
    return cases


def missing_required_cases() -> list[BadInput]:
    """Every command with a required option or argument, called without any arguments at all."""
    return [BadInput(f"{'-'.join(words)}-missing-required", words, says="missing")
            for words, command in COMMANDS.items()
            if any(p.required for p in command.params) and not getattr(command, "no_args_is_help", False)]


def _preset(text: str):
    def write(tmp):
        (tmp / "preset.yaml").write_text(text)
    return write


def _directory(name: str):
    def make(tmp):
        (tmp / name).mkdir()
    return make


def train(case_id: str, *args: str, says: str = "", setup=None, out: str = "{tmp}/run") -> BadInput:
    """A ``privreid train`` case on the tiny settings, with a run directory that must stay absent."""
    return BadInput(f"train-{case_id}", (*TRAIN, *args, "--out", out), keep=("run",), says=says, setup=setup)


def preset(case_id: str, text: str, says: str) -> BadInput:
    """A ``privreid train --config preset.yaml`` case (no flag overrides the preset's value)."""
    return BadInput(f"train-preset-{case_id}", ("train", "--data", "{synth}", "--config", "{tmp}/preset.yaml",
                                               "--device", "cpu", "--quiet", "--out", "{tmp}/run"),
                    keep=("run",), says=says, setup=_preset(text))


VALUE_CASES = [
    # non-finite and out-of-range numbers (issue 26, 3): refused before anything is written
    *[train(f"{flag[2:]}-{v}", flag, v, says="finite")
      for flag in ("--lr-backbone", "--lr-head", "--lr-gamma", "--triplet-weight", "--label-smoothing",
                   "--random-erasing", "--dropout", "--beta")
      for v in ("nan", "inf")],
    *[train(f"set-{field}-{v}", "--set", f"optim.{field}={v}", says=f"optim.{field} must be a finite number")
      for field in ("momentum", "weight_decay", "triplet_margin") for v in ("nan", "inf", "-inf")],
    train("momentum-negative", "--set", "optim.momentum=-1", says="momentum must be >= 0"),
    train("weight-decay-negative", "--set", "optim.weight_decay=-1", says="weight_decay must be >= 0"),
    train("margin-negative", "--set", "optim.triplet_margin=-0.3", says="triplet_margin must be >= 0"),
    train("momentum-negative-preset", "--config", "{tmp}/preset.yaml", says="momentum must be >= 0",
          setup=_preset("set: [optim.momentum=-1]\n")),
    train("fedprox-mu-nan", "--method", "fedprox", "--opt", "mu=nan", says="option mu must be a finite number"),
    train("fedprox-mu-inf-set", "--method", "fedprox", "--set", "federation.method_options.mu=Infinity",
          says="option mu must be a finite number"),
    train("seed-2-64", "--seed", str(2**64), says="seed must be in 0..4294967295"),
    train("seed-2-32", "--seed", str(2**32), says="seed must be in 0..4294967295"),
    train("seed-negative", "--seed", "-1", says="seed must be in 0..4294967295"),
    train("height-huge", "--height", "100000", says="too large"),
    train("width-huge", "--width", "100000", says="too large"),
    train("height-tiny", "--height", "4", says="too small"),
    train("instances-per-id-huge", "--set", "optim.instances_per_id=1000000000", says="instances_per_id"),
    train("instances-per-id-zero", "--set", "optim.instances_per_id=0", says="instances_per_id"),
    train("rounds-zero", "--rounds", "0", says="rounds must be > 0"),
    train("rounds-negative", "--rounds", "-3", says="rounds must be > 0"),
    train("batch-size-one", "--batch-size", "1", says="batch_size must be >= 2"),
    train("batch-size-zero", "--batch-size", "0", says="batch_size must be > 0"),
    train("local-epochs-zero", "--local-epochs", "0", says="local_epochs must be > 0"),
    train("lr-negative", "--lr-backbone", "-0.1", says="learning rates"),
    train("lr-gamma-zero", "--lr-gamma", "0", says="lr_gamma"),
    train("client-fraction-zero", "--client-fraction", "0", says="client_fraction"),
    train("client-fraction-above-one", "--client-fraction", "1.5", says="client_fraction"),
    train("random-erasing-above-one", "--random-erasing", "2", says="random_erasing"),
    train("label-smoothing-one", "--label-smoothing", "1", says="label_smoothing"),
    train("dropout-one", "--dropout", "1", says="dropout"),
    train("feat-dim-zero", "--feat-dim", "0", says="feat_dim"),
    train("feat-dim-huge", "--feat-dim", "100000000", says="feat_dim"),
    train("eval-every-negative", "--eval-every", "-1", says="eval_every"),
    train("report-best-zero", "--report-best", "0", says="report_best"),
    train("lr-step-zero", "--lr-step", "0", says="lr_step"),
    train("max-steps-zero", "--max-steps", "0", says="max_steps_per_epoch"),
    train("workers-negative", "--workers", "-1", says="workers"),
    train("beta-negative", "--beta", "-1", says="beta must be >= 0"),
    train("unknown-optimizer", "--optimizer", "lbfgs", says="optimizer"),
    train("unknown-lr-schedule", "--lr-schedule", "cosine", says="--lr-schedule': 'cosine' is not one of"),
    train("unknown-eval-metric", "--eval-metric", "manhattan", says="--eval-metric"),
    train("unknown-eval-ap", "--eval-ap", "voc", says="--eval-ap"),
    train("unknown-beta-mode", "--beta-mode", "sideways", says="--beta-mode"),
    train("unknown-device", "--device", "tpu", says="device"),
    train("device-index-text", "--device", "cuda:x", says="'cuda:x' is not one of [auto|cpu|cuda|cuda:N]"),
    train("device-set-unknown", "--set", "runtime.device=tpu", says="device must be"),
    train("unknown-arch", "--arch", "resnet101", says="'resnet101' is not one of"),
    train("unknown-logger", "--logger", "mlflow", says="'mlflow' is not one of"),
    train("unknown-method", "--method", "nosuchmethod", says="nosuchmethod"),
    train("unknown-method-option", "--opt", "nosuch=1", says="has no option nosuch"),
    train("opt-without-equals", "--opt", "mu", says="--opt expects key=value"),
    train("noise-without-dp", "--noise-multiplier", "1", says="without --dp-sgd"),
    train("dp-noise-nan", "--dp-sgd", "--noise-multiplier", "nan", "--triplet-weight", "0", says="finite"),
    train("delta-one", "--dp-sgd", "--noise-multiplier", "1", "--delta", "1", says="delta"),
    train("set-no-section", "--set", "nosuch.rounds=2", says="no section"),
    train("set-no-field", "--set", "optim.nosuch=2", says="has no field"),
    train("set-no-equals", "--set", "federation.rounds", says="--set expects"),
    train("set-rounds-float", "--set", "federation.rounds=2.7", says="expected an integer"),
    train("set-rounds-quoted", "--set", 'federation.rounds="3"', says="expected an integer"),
    train("set-momentum-text", "--set", "optim.momentum=fast", says="expected a number"),
    train("out-empty", says="empty path", out=""),
    # YAML types (issue 26, 3): a preset value satisfies the flag's type
    *[preset(f"rounds-{kind}", f"rounds: {v}\n", says=message)
      for kind, v, message in (("float", "2.7", "rounds: '2.7' is not a valid integer"),
                               ("quoted", '"3"', "rounds: '3' is not a valid integer (quoted"),
                               ("list", "[1]", "rounds: expected a single value"),
                               ("mapping", "{a: 1}", "rounds: expected a single value"),
                               ("bool", "true", "rounds: 'true' is not a valid integer"),
                               ("text", "abc", "rounds: 'abc' is not a valid integer"),
                               ("null", "null", "rounds: a value is required"), ("zero", "0", "rounds must be > 0"))],
    preset("unknown-key", "nosuch: 1\n", says="unknown option"),
    preset("not-a-mapping", "- rounds\n", says="mapping"),
    preset("bad-yaml", "rounds: [1\n", says="not valid YAML"),
    preset("lr-nan", "lr-backbone: .nan\n", says="finite"),
    preset("momentum-nan", "set: [optim.momentum=nan]\n", says="finite"),
    preset("seed-huge", f"seed: {2**64}\n", says="seed must be in"),
    preset("height-huge", "height: 100000\n", says="too large"),
    train("preset-missing", "--config", "{tmp}/nope.yaml", says="preset not found"),
    # issue 39: a repeated key is refused naming it and both lines (YAML keeps the last silently); so is a file
    # that is not UTF-8 text, and a directory at the preset's path
    preset("duplicate-rounds", "rounds: 1\nmethod: fedpav\nrounds: 3\n",
           says="the key 'rounds' is given twice (lines 1 and 3)"),
    preset("duplicate-method", "method: fedpav\nmethod: fedavg\n", says="the key 'method' is given twice (lines 1 and 2)"),
    preset("duplicate-nested", "opt:\n  mu: 0.1\n  mu: 0.2\n", says="the key 'mu' is given twice (lines 2 and 3)"),
    BadInput("train-preset-duplicate-dry-run", ("train", "--data", "{synth}", "--config", "{tmp}/preset.yaml",
                                                "--dry-run", "--out", "{tmp}/run"), keep=("run",),
             says="the key 'rounds' is given twice", setup=_preset("rounds: 1\nrounds: 3\n")),
    BadInput("train-preset-utf16", ("train", "--data", "{synth}", "--config", "{tmp}/preset.yaml", "--out",
                                    "{tmp}/run"), keep=("run",), says="is not UTF-8 text",
             setup=lambda tmp: (tmp / "preset.yaml").write_bytes("rounds: 1\n".encode("utf-16"))),
    BadInput("train-preset-binary", ("train", "--data", "{synth}", "--config", "{tmp}/preset.yaml", "--out",
                                     "{tmp}/run"), keep=("run",), says="is not UTF-8 text",
             setup=lambda tmp: (tmp / "preset.yaml").write_bytes(bytes(range(256)))),
    # issue 39, item 7: the memory rule for corrupt --size (before the image is read); the SuperLink's database
    BadInput("corrupt-size-huge", ("corrupt", "--image", "{tmp}/nope.png", "--size", "100000x100000", "--out",
                                   "{tmp}/out/g.png"), keep=("out",), says="too large (max 2048 per side"),
    BadInput("superlink-database-a-directory", ("flower", "superlink", "--insecure", "--database", "{tmp}/dir"),
             keep=("dir",), setup=_directory("dir"), says="dir is a directory; give a file name"),
    BadInput("superlink-database-no-folder", ("flower", "superlink", "--insecure", "--database",
                                              "{tmp}/nope/state.db"), keep=("nope",), says="does not exist"),
    # issue 39, item 9: input that was silently taken, and messages that pointed the wrong way
    BadInput("corrupt-severities-empty-item", ("corrupt", "--image", "{tmp}/nope.png", "--severities", "1,,2",
                                               "--out", "{tmp}/out/g.png"), keep=("out",),
             says="--severities takes comma-separated values, none of them empty (got '1,,2')"),
    train("train-domains-empty", "--train-domains", "", says="--train-domains takes comma-separated values"),
    train("test-domains-empty-item", "--test-domains", "synthC,", says="--test-domains takes comma-separated"),
    BadInput("attack-model-and-models", ("attack", "--model", "{tmp}/a.pt", "--models", "{tmp}/b.pt", "--out",
                                         "{tmp}/out"), keep=("out",), says="--model or several with --models, not both"),
    BadInput("eval-splits-without-a-dg-format", ("eval", "--model", "{tmp}/nope.pt", "--splits", "{tmp}/s.json"),
             says="--splits reuses the splits of a small DG benchmark"),
    BadInput("reproduce-list-json", ("reproduce", "--list", "--json"), says="--list names every table"),
    BadInput("eval-truncated-checkpoint", ("eval", "--model", "{tmp}/cut.pt"), says="is a torch file cut short",
             setup=lambda tmp: (tmp / "cut.pt").write_bytes(b"PK\x03\x04" + b"archive/data.pkl" + bytes(200))),
    train("preset-directory", "--config", "{tmp}/dir", says="dir is a directory; give a YAML file", setup=_directory("dir")),
    # missing files, directories where files are expected, unknown choices
    BadInput("eval-model-missing", ("eval", "--model", "{tmp}/nope.pt"), says="nope.pt"),
    BadInput("eval-model-directory", ("eval", "--model", "{tmp}/dir"), setup=_directory("dir")),
    BadInput("eval-severity-superscript", ("eval", "--model", "{tmp}/nope.pt", "--corruption", "all",
                                           "--severity", "\u00b2"), says="--severity"),
    BadInput("eval-severity-text", ("eval", "--model", "{tmp}/nope.pt", "--corruption", "all",
                                    "--severity", "high"), says="--severity"),
    BadInput("eval-json-empty", ("eval", "--model", "{tmp}/nope.pt", "--json", ""), says="empty path"),
    BadInput("compare-markdown-empty", ("compare", "{tmp}/nope.pt", "--markdown", ""), says="empty path"),
    BadInput("export-model-missing", ("export", "--model", "{tmp}/nope.pt", "--out", "{tmp}/m.pt"),
             keep=("m.pt",), says="nope.pt"),
    BadInput("export-unknown-format", ("export", "--model", "{tmp}/nope.pt", "--format", "tflite", "--out",
                                       "{tmp}/out/m.pt"), keep=("out",)),
    BadInput("corrupt-image-missing", ("corrupt", "--image", "{tmp}/nope.png", "--out", "{tmp}/out/g.png"),
             keep=("out",), says="nope.png"),
    BadInput("corrupt-image-directory", ("corrupt", "--image", "{tmp}/dir", "--out", "{tmp}/out/g.png"),
             keep=("out",), setup=_directory("dir")),
    BadInput("attack-model-missing", ("attack", "--model", "{tmp}/nope.pt", "--out", "{tmp}/out"), keep=("out",),
             says="nope.pt"),
    BadInput("invert-model-missing", ("invert", "--model", "{tmp}/nope.pt", "--out", "{tmp}/out"), keep=("out",),
             says="nope.pt"),
    BadInput("audit-model-missing", ("audit", "--models", "{tmp}/nope.pt", "--out", "{tmp}/out"), keep=("out",),
             says="nope.pt"),
    BadInput("audit-round-text", ("audit", "--models", "{tmp}/nope.pt", "--round", "abc"),
             says="not a valid integer"),
    BadInput("compare-no-models", ("compare", "--out", "{tmp}/out"), keep=("out",), says="checkpoint"),
    BadInput("reproduce-unknown-table", ("reproduce", "nope", "--out", "{tmp}/out"), keep=("out",), says="nope"),
    BadInput("sweep-unknown-param", ("sweep", "--param", "nosuch", "--values", "1,2", "--out", "{tmp}/out"),
             keep=("out",), says="nosuch"),
    BadInput("data-info-missing", ("data", "info", "{tmp}/nope"), says="nope"),
    *[BadInput(f"{words[0]}-{name}-{v}", (*words, "--out", "{tmp}/out"), keep=("out",), env={name: v}, says=name)
      for words in (("train", "--data", "{synth}"), ("data", "synth"))
      for name, v in (("PRIVREID_DECODED_MB", "nan"), ("PRIVREID_DECODED_MB", "-1"),
                      ("PRIVREID_HEAP_SLACK_MB", "inf"))],
    BadInput("unknown-command", ("nosuchcommand",), says="no such command"),
    BadInput("unknown-data-subcommand", ("data", "nosuch"), says="no such command"),
    BadInput("unknown-flower-subcommand", ("flower", "nosuch"), says="no such command"),
    BadInput("top-level-unknown-option", ("--no-such-option",), says="no such option"),
    BadInput("option-without-value", ("train", "--rounds"), says="requires an argument"),
]

CASES = parse_cases() + missing_required_cases() + VALUE_CASES


def test_every_command_is_covered():
    """The generated cases reach every command and subcommand, and the suite is the campaign's size."""
    covered = {case.id.split("-unknown-option")[0] for case in parse_cases() if case.id.endswith("-unknown-option")}
    assert covered == {"-".join(words) for words in COMMANDS}
    assert len({case.id for case in CASES}) == len(CASES) >= 200


@pytest.mark.parametrize("case", CASES, ids=str)
def test_refused_in_one_line(case, tmp_path, tiny_synth):
    check_refused(case, tmp_path, synth=tiny_synth)


def test_the_help_hint_stays_inside_the_line(tmp_path):
    """A parse error names the help of the command it belongs to, inside the one line."""
    line = check_refused(BadInput("rounds", ("train", "--rounds", "abc")), tmp_path)
    assert line == "error: Invalid value for '--rounds': 'abc' is not a valid integer. (see privreid train --help)"
    line = check_refused(BadInput("synth", ("data", "synth", "--seed", "x", "--out", "{tmp}/o")), tmp_path)
    assert line.endswith("(see privreid data synth --help)")


@pytest.mark.parametrize("words", [(), ("data",), ("flower",)])
def test_a_group_alone_still_prints_its_help(words):
    from badinput import run_cli

    outcome = run_cli(words)
    assert "Usage: privreid" in outcome.stdout and "error:" not in outcome.stderr


#: cases that only a real process shows (an environment variable read when privreid.data is first imported)
SUBPROCESS_CASES = [
    BadInput(f"eval-decoded-mb-{v}", ("eval", "--model", "{tmp}/nope.pt"), env={"PRIVREID_DECODED_MB": v},
             says="PRIVREID_DECODED_MB", subprocess=True)
    for v in ("nan", "-1", "lots")
]


@pytest.mark.slow
@pytest.mark.parametrize("case", SUBPROCESS_CASES, ids=str)
def test_refused_in_one_line_by_a_process(case, tmp_path):
    check_refused(case, tmp_path)
