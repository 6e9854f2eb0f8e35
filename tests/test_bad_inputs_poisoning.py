"""Bad poisoning and robust-aggregation settings: one ``error:`` line, exit 2, nothing written (issue 30)."""

from __future__ import annotations

import pytest

from badinput import BadInput, check_refused

TINY = ("--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--rounds", "1", "--device", "cpu", "--quiet")
#: the tiny federation has 3 clients on the command line, all sampled every round
TRAIN = ("train", "--data", "{synth}", *TINY, "--out", "{tmp}/run")


def _case(case_id: str, *args: str, says: str) -> BadInput:
    return BadInput(case_id, (*TRAIN, *args), keep=("run",), says=says)


CASES = [
    _case("krum-n-at-most-2f-2", "--set", "robustness.defenses.robust-krum.f=1", says="more than 2f + 2 = 4 clients per round for f = 1 (a round aggregates 3)"),
    _case("multi-krum-keeps-too-many", "--set", "robustness.defenses.robust-krum.f=0", "--set",
          "robustness.defenses.robust-krum.keep=4", says="keep must lie in [0, n - f] = [0, 3]"),
    _case("bulyan-too-few", "--set", "robustness.defenses.robust-bulyan.f=1", says="at least 4f + 3 = 7 clients"),
    _case("trim-half", "--set", "robustness.defenses.robust-trimmed-mean.fraction=0.5", says="fraction must lie in [0, 0.5)"),
    # 3 clients, fraction 0.2: int(0.6) = 0 values trimmed per side, a plain mean under a robust name (issue 39)
    _case("trim-nothing", "--set", "robustness.defenses.robust-trimmed-mean.fraction=0.2",
          says="int(fraction * n) = int(0.2 * 3) = 0 values per side"),
    _case("trim-not-a-number", "--set", "robustness.defenses.robust-trimmed-mean.fraction=\"x\"", says="must be a number"),
    _case("norm-bound-zero", "--set", "robustness.defenses.norm-bound.bound=0", says="bound must be > 0"),
    _case("weak-dp-no-noise", "--set", "robustness.defenses.weak-dp.noise=0", says="noise must be > 0"),
    _case("robust-with-secagg", "--secure-aggregation", "--set", "robustness.defenses.robust-median={{}}",
          says="'robust-median' reads each client's update, which --secure-aggregation hides"),
    _case("weak-dp-with-secagg", "--secure-aggregation", "--set", "robustness.defenses.weak-dp.bound=1",
          says="--secure-aggregation hides"),
    _case("fltrust-without-root", "--set", "robustness.defenses.fltrust={{}}", says="needs the server's root update g0"),
    _case("flame-negative-noise", "--set", "robustness.defenses.flame.noise_lambda=-0.1", says="noise_lambda must be >= 0"),
    _case("robust-on-cdw", "--method", "fedpav-cdw", "--set", "robustness.defenses.robust-median={{}}",
          says="replaces a plain mean of the uploads"),
    _case("unknown-option", "--set", "robustness.defenses.robust-median.f=1", says="has no option f"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_refused_in_one_line(case, tmp_path, tiny_synth):
    assert case.says, f"{case.id}: a case names what its one line must say"  # else the check below is vacuous
    line = check_refused(case, tmp_path, synth=tiny_synth)
    assert case.says.lower() in line.lower()


ADVERSARY_CASES = [
    _case("more-malicious-than-clients", "--adversary", "scaled", "--malicious-clients", "4",
          says="--malicious-clients 4: the federation has 3 clients"),
    _case("unknown-malicious-client", "--adversary", "scaled", "--malicious-clients", "synthA,nope",
          says="no client named nope"),
    _case("unknown-adversary", "--adversary", "nope", says="unknown adversary 'nope'; choose one of: alie, backdoor, constrain-scale, dba, fang, ipm, label-flip"),
    _case("unknown-adversary-option", "--adversary", "scaled", "--set", "robustness.adversary.boost=3",
          says="adversary 'scaled' has no option boost"),
    _case("negative-scale", "--adversary", "sign-flip", "--set", "robustness.adversary.scale=-1",
          says="scale must be a number > 0"),
    _case("adversary-without-clients", "--method", "centralized", "--adversary", "scaled",
          says="--adversary needs a federated method"),
    _case("trigger-larger-than-image", "--adversary", "backdoor", "--set", "robustness.adversary.size=17",
          says="a 17x17 trigger is larger than the 32x16 image (size must be at most 16)"),
    _case("dba-trigger-larger-than-image", "--adversary", "dba", "--malicious-clients", "2", "--set",
          "robustness.adversary.size=33", says="a 33x33 trigger is larger than the 32x16 image"),
    _case("target-not-in-data", "--adversary", "backdoor", "--set", "robustness.adversary.target=999",
          says="target identity 999 is not in the gallery of domain synthC"),
    _case("target-not-an-identity", "--adversary", "dba", "--set", "robustness.adversary.target=\"x\"",
          says="target identity 'x' is not in the gallery"),
    _case("backdoor-goal", "--adversary", "backdoor", "--set", "robustness.adversary.goal=\"hide\"",
          says="goal must be one of targeted, evasion"),
    _case("backdoor-fraction", "--adversary", "backdoor", "--set", "robustness.adversary.fraction=0",
          says="fraction must lie in (0, 1]"),
    _case("backdoor-boost", "--adversary", "dba", "--set", "robustness.adversary.boost=0",
          says="adversary 'dba': boost must be a number > 0 (got 0)"),
    _case("backdoor-position", "--adversary", "backdoor", "--set", "robustness.adversary.position=\"middle\"",
          says="trigger position must be one of center"),
    _case("dba-more-strips-than-rows", "--adversary", "dba", "--malicious-clients", "3", "--set",
          "robustness.adversary.size=2", says="a 2-pixel trigger cannot be split into 3 strips"),
    *(_case(case_id, "--adversary", name, *(a for setting in sets for a in ("--set", f"robustness.adversary.{setting}")),
            says=says) for case_id, name, sets, says in (
        ("trigger-kind", "backdoor", ['trigger="star"'], "trigger must be one of patch, blend (got 'star')"),
        ("blend-alpha", "neurotoxin", ['trigger="blend"', "alpha=0"], "trigger alpha must lie in (0, 1] (got 0)"),
        ("dba-blend", "dba", ['trigger="blend"'], "a distributed backdoor splits a patch trigger into strips"),
        ("constrain-scale-bound", "constrain-scale", ["bound=-1"], "'constrain-scale': bound must be a number > 0"),
        ("constrain-scale-no-boost", "constrain-scale", ["boost=3"], "'constrain-scale' has no option boost"),
        ("neurotoxin-ratio", "neurotoxin", ["ratio=1.5"], "'neurotoxin': ratio must lie in [0, 1) (got 1.5)"))),
    _case("more-malicious-than-clients-dba", "--adversary", "dba", "--malicious-clients", "4",
          says="--malicious-clients 4: the federation has 3 clients"),
]

#: the threat model and the adaptive attacks (issue 43): (adversary, --set robustness.adversary.OPTION=VALUE, the line)
ADVERSARY_CASES += [_case(f"threat-{name}-{setting.partition('=')[0]}", "--adversary", name, "--set",
                          f"robustness.adversary.{setting}", says=says) for name, setting, says in [
    ("backdoor", 'draw="per-round"', "adversary 'backdoor' poisons its clients' data once"),
    ("ipm", 'rounds="2:1"', "adversary 'ipm': rounds must be START:STOP with 1 <= START <= STOP <= 1 (the run's "
                            "rounds; got '2:1')"),
    ("alie", "rounds=1", "got 1)"),
    ("sign-flip", "every=0", "adversary 'sign-flip': every must be a whole number >= 1 (got 0)"),
    ("fang", 'draw="often"', "draw must be one of fixed, per-round (got 'often')"),
    ("min-sum", 'perturbation="cos"', "adversary 'min-sum': perturbation must be one of unit, std, sign (got 'cos')"),
]] + [_case("threat-per-round-named", "--adversary", "min-max", "--malicious-clients", "synthA", "--set",
            "robustness.adversary.draw=\"per-round\"", says="draw=per-round draws a number of clients"),
                     _case("threat-evasion-backdoor-window", "--adversary", "backdoor", "--set",
                           'robustness.adversary.goal="evasion"', "--set", "robustness.adversary.every=2",
                           says="adversary 'backdoor' cannot stay dormant outside its attack rounds here: without its "
                                "poisoned images")]


@pytest.mark.parametrize("case", ADVERSARY_CASES, ids=str)
def test_adversary_refused_in_one_line(case, tmp_path, tiny_synth):
    assert case.says, f"{case.id}: a case names what its one line must say"  # else the check below is vacuous
    line = check_refused(case, tmp_path, synth=tiny_synth)
    assert case.says.lower() in line.lower()
