"""``privreid train --dry-run``: the whole recipe before a GPU-day is spent, and nothing written (issue 25, sec. 4)."""

import hashlib
import json
from pathlib import Path

from typer.testing import CliRunner

from privreid.cli import app
from privreid.run_plan import _rate_spans

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = ["--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--device", "cpu",
        "--test-domains", "synthC"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_dry_run_json_plans_a_paper_preset_and_writes_nothing(tiny_synth, tmp_path):
    out = tmp_path / "run"
    res = invoke("train", "--config", CONFIGS / "fedreid-paper.yaml", "--data", tiny_synth, *TINY, "--rounds", 30,
                 "--out", out, "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    assert {"config", "deviations", "lr", "evaluation", "lr_schedule"} <= set(plan)
    assert plan["config"]["federation"]["method"] == "fedreid" and plan["config"]["data"]["height"] == 32
    # one rate per round for each group: once at round 20 (0-based), the FedReID reference code's schedule
    assert plan["lr"]["backbone"] == [0.01] * 20 + [0.01 * 0.1] * 10 and len(plan["lr"]["head"]) == 30
    assert plan["evaluation"]["metric"] == "euclidean" and plan["evaluation"]["flip"] is True
    assert plan["evaluation"]["testsets"]["synthC"]["split"] == "unseen"
    assert plan["datasets"] == {name: "synthetic" for name in ("synthA", "synthB", "synthC")}
    assert "Market-1501 rules" in plan["evaluation"]["testsets"]["synthA"]["protocol"]
    # the scale-down is listed with its source
    assert any(d.startswith("--height 32 (FedReID: 256; reference code SunTongtongtong/FedReid")
               for d in plan["deviations"])
    assert not out.exists()


def test_dry_run_text_and_an_existing_run_is_untouched(tiny_synth, tmp_path):
    out = tmp_path / "run"
    res = invoke("train", "--data", tiny_synth, *TINY, "--rounds", 1, "--max-steps", 1, "--quiet", "--out", out)
    assert res.exit_code == 0, res.output
    before = tree_digest(out)
    res = invoke("train", "--config", CONFIGS / "fedpav-paper.yaml", "--data", tiny_synth, *TINY, "--out", out,
                 "--dry-run")
    assert res.exit_code == 0, res.output
    assert "rounds 1-300: backbone 0.005, head 0.05, neck 0.05" in res.output
    assert "evaluation: metric cosine, flip on" in res.output
    assert "--lr-schedule local-step follows the reference code cap-ntu/FedReID client.py" in res.output
    assert tree_digest(out) == before


def test_dry_run_refuses_bad_input_in_one_line(tiny_synth, tmp_path):
    res = invoke("train", "--data", tiny_synth, *TINY, "--lr-schedule", "cosine", "--dry-run", "--out", tmp_path / "x")
    assert res.exit_code == 2 and "'cosine' is not one of 'step', 'once', 'local-step', 'none'" in res.output
    res = invoke("train", "--data", tmp_path / "missing", "--dry-run", "--out", tmp_path / "x")
    assert res.exit_code == 2 and "not found" in res.output
    res = invoke("train", "--data", tiny_synth, *TINY, "--json", "--out", tmp_path / "x")
    assert res.exit_code == 2 and "--json prints the plan of --dry-run" in res.output
    assert not (tmp_path / "x").exists()


def test_rate_spans_cover_every_round_once():
    rates = {"backbone": [1, 1, 0.5, 0.5, 0.25], "head": [10, 10, 5, 5, 2.5]}
    assert _rate_spans(rates) == ["  rounds 1-2: backbone 1, head 10", "  rounds 3-4: backbone 0.5, head 5",
                                  "  round 5: backbone 0.25, head 2.5"]


def test_reproduce_dry_run_plans_every_run_of_a_paper_table_without_data(tmp_path):
    res = invoke("reproduce", "fedreid-table2", "--scale", "paper", "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    [run] = plan["runs"]
    assert run["config"]["data"]["roots"][0].startswith("DATA_ROOT/")
    assert run["lr"]["backbone"][19:21] == [0.01, 0.01 * 0.1] and run["evaluation"]["metric"] == "euclidean"
    assert [c["test set"] for c in plan["cells"]][:2] == ["ilids", "viper"]
    assert plan["cells"][0]["ranking"].startswith("ilids under the DG-ReID protocol (10 seeded splits")
    assert "with the run's metric, flip and AP" in plan["cells"][0]["ranking"]
    res = invoke("reproduce", "fedreid-table2", "--scale", "paper", "--dry-run", "--data-root", tmp_path / "none")
    assert res.exit_code == 2 and "missing dataset" in res.output  # given a --data-root, its datasets are checked


def test_reproduce_dry_run_smoke_covers_every_table_run():
    from privreid.experiments.reproduce import TABLES, plan_table

    for key, spec in TABLES.items():
        if not spec.rows:
            continue
        plan = plan_table(key, scale="smoke")
        assert [r["run"] for r in plan["runs"]] == spec.runs("smoke"), key
        assert all(len(r["lr"]["backbone"]) == r["config"]["federation"]["rounds"] for r in plan["runs"]), key


def test_each_paper_reads_msmt17_as_its_table_one_counts_it():
    # FedReID / SKA Table I: the 30,248 train images; FedPav Table 1: train + val (32,621)
    from privreid.experiments.reproduce import plan_table

    def msmt(key):
        [root] = {r for run in plan_table(key, scale="paper")["runs"] for r in run["config"]["data"]["roots"]
                  if "msmt17" in r}
        return root.split(":")[-1]

    assert msmt("fedreid-table2") == msmt("ska-table4") == "msmt17-train"
    assert msmt("fedpav-table4") == "msmt17"


def test_dry_run_names_each_roots_format(tmp_path):
    from test_cli import market_tree

    market_tree(tmp_path / "mkt", train_pids=(1, 2, 3))
    res = invoke("train", "--data", f"{tmp_path / 'mkt'}:market1501", "--data", "synth", "--height", 32, "--width",
                 16, "--device", "cpu", "--test-domains", "synthD", "--dry-run", "--json", "--out", tmp_path / "x")
    assert res.exit_code == 0, res.output
    datasets = json.loads(res.output)["datasets"]
    assert datasets["mkt"] == "market1501" and datasets["synthA"] == "synthetic"


def test_eval_ranks_with_the_devkit_ap_on_request(tiny_synth, tmp_path):
    # issue 25: `privreid eval` offers the Market-1501 devkit's AP (FedPav's and Wu & Gong's code) beside torchreid's
    out = tmp_path / "run"
    res = invoke("train", "--data", tiny_synth, *TINY, "--rounds", 1, "--max-steps", 1, "--quiet", "--out", out)
    assert res.exit_code == 0, res.output
    maps = {}
    for ap in ("torchreid", "devkit"):
        res = invoke("eval", "--model", out / "ckpt.pt", "--domains", "synthC", "--device", "cpu", "--ap", ap,
                     "--json", tmp_path / f"{ap}.json")
        assert res.exit_code == 0, res.output
        [row] = json.loads((tmp_path / f"{ap}.json").read_text())
        maps[ap] = row["mAP"]
    assert maps["torchreid"] != maps["devkit"]
    res = invoke("eval", "--model", out / "ckpt.pt", "--device", "cpu", "--ap", "trapezoid")
    assert res.exit_code == 2 and "trapezoid" in res.output
