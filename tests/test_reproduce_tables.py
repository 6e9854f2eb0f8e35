"""The further reproducible tables: their cells build the intended runs (fast), and each runs end to end at smoke
scale (slow: every one trains several runs)."""

from __future__ import annotations

import json

import pytest

from privreid.experiments.reproduce import TABLES, run_table
from privreid.experiments.reproduce.fedreid import FIG3_BETAS


def _smoke_config(key: str, row: str, group: str):
    [spec_row] = [r for r in TABLES[key].rows if r.name == row]
    return spec_row.train[group]["smoke"].config()


def test_fedreid_fig3_cells_are_fedreid_runs_with_the_cell_beta_and_mode():
    for row, mode in (("Single (Eq. 14)", "upload"), ("Double (Eq. 14+15)", "both")):
        for beta in FIG3_BETAS:
            cfg = _smoke_config("fedreid-fig3", row, f"beta={beta}")
            assert (cfg.federation.method, cfg.privacy.beta, cfg.privacy.beta_mode) == ("fedreid", float(beta), mode)
    assert [c.source for c in TABLES["fedreid-fig3"].columns] == [("dg", "viper")] * len(FIG3_BETAS)


@pytest.mark.slow
def test_fedreid_fig3_smoke_end_to_end(tmp_path):
    out = tmp_path / "fig3"
    rows = run_table("fedreid-fig3", scale="smoke", out=out, device="cpu", echo=lambda _: None)
    ran = [r for r in rows if r["status"] == "run"]
    assert len(ran) == 2 * len(FIG3_BETAS) and all(0 <= r["privreid"] <= 100 for r in ran)
    for r in ran:
        run = out / "runs" / f"{r['column']}-{r['row']}"
        evaluation = json.loads((run / "eval-synth-viper.json").read_text())
        assert r["privreid"] == round(100 * evaluation["rank1"], 2) and len(evaluation["per_split"]) == 10
    assert {r["privreid"] for r in rows if r["row"] in ("Supervised", "Random-Guess")} == {None}
    assert (out / "figure.png").stat().st_size > 0


def test_ska_table4_rows_switch_the_three_components():
    from privreid.federated.methods.ska import SKA, options_from_config

    expected = {"Baseline": (False, False, False), "Baseline+AN": (True, False, False),
                "Baseline+LSN": (False, True, False), "Baseline+LSN+Dual": (False, True, True),
                "Baseline+LSN+AN": (True, True, False), "Baseline+LSN+AN+Dual": (True, True, True)}
    for row, (an, lsn, dual) in expected.items():
        cfg = _smoke_config("ska-table4", row, "")
        assert cfg.federation.method == "ska"
        opts = options_from_config(cfg)
        assert (opts.an, opts.lsn, opts.dual) == (an, lsn, dual)
        # issue 25: the Baseline rows are Table 2's FedAvg+D and FedBN+D, weighted by data volume
        assert SKA.option(cfg, "weighting") == ("volume" if row in ("Baseline", "Baseline+LSN") else "uniform"), row
    sources = {c.name: (c.source, c.smoke, c.metric) for c in TABLES["ska-table4"].columns}
    assert sources["Duke R1"] == (("local", "rank1"), "synthA", "rank1")
    assert sources["VIPeR mAP"] == (("dg", "viper"), "synth-viper", "mAP")


def test_local_columns_read_the_personalised_model_of_that_domain(tmp_path):
    """A "local" cell is the mean of the clients' personalised metrics on the named seen test set."""
    from privreid.experiments.reproduce import _cell
    from privreid.experiments.reproduce.spec import Column, Row, smoke

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    run.joinpath("summary.json").write_text(json.dumps({"local_seen_per_testset": {
        "c1@synthA": {"rank1": 0.5}, "c2@synthA": {"rank1": 0.25}, "c3@synthB": {"rank1": 1.0}}}))
    row = Row("r", train={"": {"smoke": smoke("fedavg")}})
    cell = _cell(row, Column("A R1", ("local", "rank1"), "synthA", "a"), "smoke", run, None, "cpu")
    assert cell == 37.5
    assert _cell(row, Column("D R1", ("local", "rank1"), "synthD", "d"), "smoke", run, None, "cpu") is None


@pytest.mark.slow
def test_ska_table4_smoke_end_to_end(tmp_path):
    out = tmp_path / "ska4"
    rows = run_table("ska-table4", scale="smoke", out=out, device="cpu", echo=lambda _: None)
    assert len(rows) == 6 * 8 and all(0 <= r["privreid"] <= 100 for r in rows)
    summary = json.loads((out / "runs" / "Baseline" / "summary.json").read_text())
    [duke] = [m for k, m in summary["local_seen_per_testset"].items() if k.endswith("@synthA")]
    by = {(r["row"], r["column"]): r for r in rows}
    assert by[("Baseline", "Duke R1")]["privreid"] == round(100 * duke["rank1"], 2)
    assert by[("Baseline", "Duke R1")]["published"] == 70.8


def test_fedpav_table4_cells_are_increases_over_the_standalone_run(tmp_path):
    """With every run's summary in place (nothing trains), each cell is the run's local R1 minus standalone's."""
    spec = TABLES["fedpav-table4"]
    local = {"Standalone": 0.25, "Benchmark": 0.5, "FedNova": 0.375, "FedProx": 0.125, "CC": 0.25, "CDW": 0.75,
             "CC & CDW": 1.0}
    for name, r1 in local.items():
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        run.joinpath("summary.json").write_text(json.dumps({"local_seen_per_testset": {
            f"{d}@{d}": {"rank1": r1 + i / 8} for i, d in enumerate(("synthA", "synthB", "synthC"))}}))
    rows = run_table("fedpav-table4", scale="smoke", out=tmp_path, device="cpu", echo=lambda _: None)
    by = {(r["row"], r["column"]): r for r in rows}
    for name, r1 in local.items():
        if name != "Standalone":
            for column in ("MSMT17", "DukeMTMC", "Market"):
                assert by[(name, column)]["privreid"] == round(100 * (r1 - local["Standalone"]), 2)
    assert by[("CDW", "VIPeR")]["privreid"] is None and by[("CDW", "VIPeR")]["published"] == 26.0
    assert by[("FedNova", "MSMT17")]["status"] == "run"
    assert {r.name: _smoke_config("fedpav-table4", r.name, "").federation.method for r in spec.rows if r.train} == {
        "Benchmark": "fedpav", "FedNova": "fednova", "FedProx": "fedprox", "CC": "fedpav-cc", "CDW": "fedpav-cdw",
        "CC & CDW": "fedpav-cdw-cc"}
    assert "increase over it" in (tmp_path / "table.md").read_text()


def test_l2rw_table2_rows_put_dppt_on_each_fl_base():
    from privreid.federated.methods.dppt import DPPT

    for base, name in (("fedprox", "FedProx"), ("moon", "MOON"), ("fedavg", "FedAvg")):
        plain, dppt = _smoke_config("l2rw-table2", name, "SYSU"), _smoke_config("l2rw-table2", f"{name} +I-DPPT", "SYSU")
        assert plain.federation.method == dppt.federation.method == "dppt"
        assert [DPPT.option(plain, k) for k in ("base", "mrb", "ca")] == [base, False, "none"]
        assert [DPPT.option(dppt, k) for k in ("base", "mrb", "ca")] == [base, True, "channel"]
    not_implemented = {r.name for r in TABLES["l2rw-table2"].rows if r.train is None}
    assert {"FedNova", "FedNova +I-DPPT", "FedAvg +AGW", "MOON +DNS"} <= not_implemented


def _run_dirs(out):
    """The run directories under ``out/runs`` (not the executor's bookkeeping)."""
    return sorted(p.name for p in (out / "runs").iterdir() if p.is_dir() and not p.name.startswith("."))


def _summary(run, **blocks):
    run.mkdir(parents=True, exist_ok=True)
    run.joinpath("summary.json").write_text(json.dumps(blocks))


def _r1(value):
    return {"rank1": value, "mAP": value / 2}


def test_ska_table2_rows_are_the_papers_comparators_on_four_source_domains():
    expected = {"local supervised": "standalone", "FedAvg+D": "fedavg", "FedProx+D": "fedprox", "FedPav": "fedpav",
                "FedPav+AddData": "fedpav-cdw-kd", "FedReID": "fedreid", "MOON+D": "moon", "FedBN+D": "fedbn",
                "SKA": "ska"}
    for row, method in expected.items():
        cfg = _smoke_config("ska-table2", row, "")
        assert cfg.federation.method == method and cfg.data.train_domains == ["synthA", "synthB", "synthC", "synthD"]
        [spec_row] = [r for r in TABLES["ska-table2"].rows if r.name == row]
        paper = spec_row.train[""]["paper"]
        assert paper.preset == "ska-paper.yaml" and paper.fields["federation.method"] == method
    assert {c.source for c in TABLES["ska-table2"].columns} == {("local", "mAP"), ("local", "rank1")}


def test_fedpav_table3_global_and_local_rows_read_one_fedpav_run(tmp_path):
    """Global Model and Local Model share the FedPav run; a global cell is the run's reported global model (its
    ``best`` block: FedPav's mean of the 3 best evaluations), never the last evaluation at the top."""
    clients = {"synthA": 0.5, "synthB": 0.25, "synthC": 0.75}
    best = {"global_seen_per_testset": {d: _r1(v / 2) for d, v in clients.items()}}
    _summary(tmp_path / "runs" / "FedPav", best=best,
             global_seen_per_testset={d: _r1(0.0) for d in clients},
             local_seen_per_testset={f"{d}@{d}": _r1(v) for d, v in clients.items()})
    _summary(tmp_path / "runs" / "Centralized Training", best={"global_seen_per_testset": {
        d: _r1(1.0) for d in clients}})
    _summary(tmp_path / "runs" / "Standalone Training", best=None,
             local_seen_per_testset={f"{d}@{d}": _r1(v / 4) for d, v in clients.items()})
    rows = run_table("fedpav-table3", scale="smoke", out=tmp_path, device="cpu", echo=lambda _: None)
    by = {(r["row"], r["column"]): r["privreid"] for r in rows}
    for column, domain in (("MSMT17", "synthA"), ("DukeMTMC", "synthB"), ("Market", "synthC")):
        assert by[("Global Model", column)] == 100 * clients[domain] / 2
        assert by[("Local Model", column)] == 100 * clients[domain]
        assert by[("Standalone Training", column)] == 100 * clients[domain] / 4
        assert by[("Centralized Training", column)] == 100.0
    assert by[("Local Model", "VIPeR")] is None
    assert _run_dirs(tmp_path) == ["Centralized Training", "FedPav", "Standalone Training"]
    assert "Deviations from the paper's protocol:" in (tmp_path / "table.md").read_text()


def test_fedarks_table1_cells_are_the_global_model_on_the_held_out_domain_and_savg_their_mean(tmp_path):
    spec = TABLES["fedarks-table1"]
    held_out = {"MS+C2+C3→M": ("synthA", 0.5), "M+C2+C3→MS": ("synthD", 0.25), "MS+C2+M→C3": ("synthC", 0.125)}
    for row in (r for r in spec.rows if r.train):
        for task, (domain, r1) in held_out.items():
            cfg = row.train[task]["smoke"].config()
            assert cfg.data.test_domains == [domain]
            _summary(tmp_path / "runs" / row.run_name(task), global_seen_per_testset={"synthB": _r1(1.0)},
                     global_unseen_per_testset={domain: _r1(r1)})
    rows = run_table("fedarks-table1", scale="smoke", out=tmp_path, device="cpu", echo=lambda _: None)
    by = {(r["row"], r["column"]): r for r in rows}
    for task, (_, r1) in held_out.items():
        assert by[("FedARKS", f"{task} R1")]["privreid"] == 100 * r1
        assert by[("FedARKS", f"{task} mAP")]["privreid"] == 100 * r1 / 2
    assert by[("FedARKS", "SAvg R1")]["privreid"] == round(100 * (0.5 + 0.25 + 0.125) / 3, 2)
    assert by[("FedARKS", "SAvg R1")]["published"] == 45.9
    assert by[("DACS", "SAvg R1")] | {} == {"row": "DACS", "column": "SAvg R1", "privreid": None, "published": 37.1,
                                           "difference": None, "status": "not implemented"}
    assert {r.name for r in spec.rows if r.train} == {"MOON", "FedProx", "FedPav", "FedReID", "FedARKS"}


def test_fedarks_table3_switches_rk_with_v_and_ks_with_beta():
    from privreid.federated.methods.fedarks import FEDARKS

    expected = {"-RK -KS (both off)": (1.0, 0.0), "+RK": (0.5, 0.0), "+KS": (1.0, 5.0),
                "+RK +KS (FedARKS)": (0.5, 5.0)}
    for row, (v, beta) in expected.items():
        cfg = _smoke_config("fedarks-table3", row, "MS+C2+C3→M")
        assert cfg.federation.method == "fedarks"
        assert (float(FEDARKS.option(cfg, "v")), float(FEDARKS.option(cfg, "beta"))) == (v, beta)
    # the paper's -RK -KS row is FedSupWA (Table 1's numbers): shown n/i with them, never as privreid's run
    [supwa] = [r for r in TABLES["fedarks-table3"].rows if r.train is None]
    assert supwa.name == "-RK -KS (FedSupWA)"
    from privreid.experiments.reproduce import published_by_row

    assert published_by_row("fedarks-table3")[supwa.name]["MS+C2+C3→M R1"] == 67.5
    assert "-RK -KS (both off)" not in published_by_row("fedarks-table3")
    assert not any(c.name.startswith("SAvg") for c in TABLES["fedarks-table3"].columns)


def test_fedpav_table5_reads_crosscam_evaluations_and_prints_the_papers_orientation(tmp_path):
    """Cells evaluate the global model under FedPav's cross-camera protocol (cached per run); table.md has the
    datasets as lines and the methods as columns, as the paper prints it."""
    for name, value in (("CC & CDW", 0.25), ("KD & CDW", 0.5)):
        _summary(tmp_path / "runs" / name)
        for stand_in in ("synth-caviar", "synth-grid"):
            (tmp_path / "runs" / name / f"eval-{stand_in}-crosscam.json").write_text(json.dumps(
                {"protocol": "crosscam", "rank1": value, "mAP": value}))
    rows = run_table("fedpav-table5", scale="smoke", out=tmp_path, device="cpu", echo=lambda _: None)
    by = {(r["row"], r["column"]): r for r in rows}
    assert by[("KD & CDW", "CAVIAR")]["privreid"] == 50.0 and by[("KD & CDW", "CAVIAR")]["published"] == 53.2
    table = (tmp_path / "table.md").read_text()
    assert "| Dataset | DSTML | UMDL |" in table
    assert "| GRID | n/i (-) | n/i (-) | n/i (9.0) |" in table and table.count("25.0 (") == 2
    assert [c.source for c in TABLES["fedpav-table5"].columns] == [("dg", "caviar-crosscam"), ("dg", "grid-crosscam")]


@pytest.mark.slow
def test_fedpav_table5_smoke_end_to_end(tmp_path):
    out = tmp_path / "t5"
    rows = run_table("fedpav-table5", scale="smoke", out=out, device="cpu", echo=lambda _: None)
    for row in ("CC & CDW", "KD & CDW"):
        evaluation = json.loads((out / "runs" / row / "eval-synth-caviar-crosscam.json").read_text())
        assert evaluation["protocol"] == "crosscam" and len(evaluation["per_split"]) == 10
        cell = next(r for r in rows if r["row"] == row and r["column"] == "CAVIAR")
        assert cell["privreid"] == round(100 * evaluation["rank1"], 2)
        assert (out / "runs" / row / "splits-synth-caviar-crosscam.json").is_file()


def test_l2rw_table9_rows_measure_attacks_and_corruptions_on_the_columns_runs(tmp_path):
    """Every row reads the column's one run ("SYSU Ours-model"): the attack / corruption evaluation cached next
    to it; a "↓" row is the relative drop 100 * (clean - attacked) / clean, as the paper prints it."""
    from privreid.experiments.reproduce.l2rw import TABLE9_ATTACKS

    for group in ("SYSU DNS", "SYSU Ours"):
        run = tmp_path / "runs" / f"{group}-model"
        _summary(run)
        for _, attack in TABLE9_ATTACKS:
            run.joinpath(f"attack-{attack}-viA.json").write_text(json.dumps(
                {"clean_rank1": 0.5, "clean_mAP": 0.4, "rank1": 0.125, "mAP": 0.1}))
        run.joinpath("corruption-viA.json").write_text(json.dumps(
            {"clean": {"rank1": 0.5, "mAP": 0.4}, "mean": {"rank1": 0.25, "mAP": 0.5}}))
    rows = run_table("l2rw-table9", scale="smoke", out=tmp_path, device="cpu", echo=lambda _: None)
    by = {(r["row"], r["column"]): r for r in rows}
    assert by[("Clean", "SYSU Ours R1")]["privreid"] == 50.0 and by[("Clean", "SYSU Ours R1")]["published"] == 51.27
    assert by[("PGD", "SYSU DNS mAP")]["privreid"] == 10.0
    assert by[("PGD ↓", "SYSU DNS R1")]["privreid"] == 75.0 and by[("PGD ↓", "SYSU DNS R1")]["published"] == 85.9
    assert by[("Corruption ↓", "SYSU Ours R1")]["privreid"] == 50.0
    assert by[("Corruption ↓", "SYSU Ours mAP")]["privreid"] == -25.0  # mAP rose under corruption
    assert by[("Clean", "LLCM Ours R1")]["privreid"] is None  # no LLCM stand-in
    assert _run_dirs(tmp_path) == ["SYSU DNS-model", "SYSU Ours-model"]
    dns = TABLES["l2rw-table9"].rows[0].train["SYSU DNS"]["smoke"].config()
    ours = TABLES["l2rw-table9"].rows[0].train["SYSU Ours"]["smoke"].config()
    assert (dns.federation.method, ours.federation.method) == ("centralized", "dppt")


def _fake_execute(trained: set, summary: dict | None = None, fail: tuple = ()):
    """An executor that writes every run's ``summary.json`` (``summary`` by run and seed) instead of training;
    the runs named in ``fail`` fail."""
    from privreid.experiments.executor import RunOutcome

    def execute(runs, out, settings, progress=True):
        outcomes = []
        for run in runs:
            trained.add(run.name)
            if run.name in fail:
                outcomes.append(RunOutcome(run, "failed", None, "error: made to fail"))
                continue
            (out / run.name).mkdir(parents=True, exist_ok=True)
            data = (summary or {}).get((run.cell["run"], run.seed), {})
            (out / run.name / "summary.json").write_text(json.dumps(data))
            outcomes.append(RunOutcome(run, "done", data, None))
        return outcomes

    return execute


@pytest.mark.parametrize("key", sorted(TABLES))
def test_the_smoke_budget_counts_the_runs_run_table_trains(key, tmp_path, monkeypatch):
    """Every cell is stubbed past training; the run directories run_table asks for are the ones the budget counts."""
    import privreid.experiments.reproduce as reproduce
    import privreid.experiments.reproduce.leakage as leakage

    trained = set()
    monkeypatch.setattr(reproduce, "execute", _fake_execute(trained))
    monkeypatch.setattr(reproduce, "_evaluate_dg", lambda *a: {"rank1": 0.5, "mAP": 0.5, "mINP": 0.5})
    monkeypatch.setattr(reproduce, "_robustness_cell", lambda *a: 50.0)
    monkeypatch.setattr(leakage, "inversion_cell", lambda *a: 0.5)
    spec = TABLES[key]
    run_table(key, scale="smoke", out=tmp_path, device="cpu", echo=lambda _: None)
    assert sorted(trained) == spec.runs("smoke")
    n = len(trained)
    assert spec.budget("smoke").startswith(f"{n} run{'s' if n != 1 else ''}, 1 round, 32x16, ")


def test_budgets_count_the_runs_the_tables_used_to_state_by_hand():
    """The counts the budgets printed before they were derived (e.g. FedPav Table 4: 6 rows + standalone)."""
    stated = {"fedreid-table2": (1, 1), "fedreid-fig3": (6, 6), "ska-table2": (9, 9), "ska-table4": (6, 6),
              "fedpav-table3": (3, 3), "fedpav-table4": (7, 7), "fedpav-table5": (2, 2),
              "fedarks-table1": (15, 15), "fedarks-table3": (12, 12), "l2rw-table2": (6, 18),
              "l2rw-table7": (4, 8), "l2rw-table9": (2, 2), "l2rw-fig8": (2, 1)}
    assert set(stated) == set(TABLES)
    for key, (smoke, paper) in stated.items():  # every table runs at paper scale (FedPav's, FedARKS' included)
        spec = TABLES[key]
        assert len(spec.runs("smoke")) == smoke, key
        assert len(spec.runs("paper")) == paper and spec.budget("paper").startswith(f"{paper} run"), key


def test_dry_run_train_args_rebuild_each_runs_configuration_through_the_cli():
    """`reproduce --dry-run` prints `privreid train` options (the preset, then --set per field) that configure
    every run of every table exactly as reproduce builds it, at both scales."""
    from privreid.commands.sweep import base_config
    from privreid.experiments.reproduce import _run_spec

    for spec in TABLES.values():
        for scale in ("smoke", "paper"):
            for row, group in spec.run_groups(scale).values():
                run = _run_spec(row, group, scale, "cpu")
                assert base_config(run.train_args("/data", "cpu")).to_dict() == run.config("/data", "cpu").to_dict()


def test_seeds_give_mean_std_n_and_an_interval_per_cell(tmp_path, monkeypatch):
    """Three seeds of FedPav Table 3: each seed its own run directory (seed 0 the table's own), each cell the mean
    of the seeds' numbers with their sample std, n and the Student-t 95% interval; table.md says so."""
    import privreid.experiments.reproduce as reproduce

    local = {0: 0.25, 1: 0.5, 2: 0.75}  # FedPav's local R1 on synthA per seed: mean 50, std 25
    summaries = {(run, seed): {"local_seen_per_testset": {"synthA@synthA": {"rank1": r1}},
                               "best": {"global_seen_per_testset": {"synthA": {"rank1": r1 / 2}}}}
                 for run in ("FedPav", "Standalone Training", "Centralized Training") for seed, r1 in local.items()}
    trained = set()
    monkeypatch.setattr(reproduce, "execute", _fake_execute(trained, summaries))
    rows = run_table("fedpav-table3", scale="smoke", out=tmp_path, device="cpu", seeds=[0, 1, 2],
                     echo=lambda _: None)
    assert {"FedPav", "FedPav-seed1", "FedPav-seed2"} <= trained and len(trained) == 9
    by = {(r["row"], r["column"]): r for r in rows}
    local_model = by[("Local Model", "MSMT17")]
    assert (local_model["privreid"], local_model["std"], local_model["n"]) == (50.0, 25.0, 3)
    half = 4.302653 * 25 / 3 ** 0.5  # t(0.975, 2) s / sqrt(n)
    assert local_model["ci95_low"] == round(50 - half, 2) and local_model["ci95_high"] == round(50 + half, 2)
    assert by[("Global Model", "MSMT17")]["privreid"] == 25.0 and by[("Local Model", "VIPeR")]["n"] == 0
    assert "| Local Model | 50.0 ± 25.0 [-12.1, 112.1] n=3 (" in (tmp_path / "table.md").read_text()


def test_a_failed_run_empties_its_seeds_cells_and_is_marked(tmp_path, monkeypatch):
    """FedPav's seed-1 run failed: its cells are the mean of the other two seeds, marked "1 failed"; with one seed,
    a failed run's cells say "failed" and the other rows are still measured."""
    import privreid.experiments.reproduce as reproduce

    summaries = {(run, seed): {"local_seen_per_testset": {"synthA@synthA": {"rank1": 0.25 * (seed + 1)}}}
                 for run in ("FedPav", "Standalone Training", "Centralized Training") for seed in (0, 1, 2)}
    monkeypatch.setattr(reproduce, "execute", _fake_execute(set(), summaries, fail=("FedPav-seed1",)))
    messages = []
    rows = run_table("fedpav-table3", scale="smoke", out=tmp_path / "three", device="cpu", seeds=[0, 1, 2],
                     echo=messages.append)
    local = next(r for r in rows if (r["row"], r["column"]) == ("Local Model", "MSMT17"))
    assert (local["privreid"], local["n"], local["failed"], local["status"]) == (50.0, 2, 1, "run")  # 25 and 75
    assert "run FedPav-seed1 failed: error: made to fail" in messages
    assert "| Local Model | 50.0 ± 35.4 n=2, 1 failed (" in (tmp_path / "three" / "table.md").read_text()

    monkeypatch.setattr(reproduce, "execute", _fake_execute(set(), summaries, fail=("FedPav",)))
    rows = run_table("fedpav-table3", scale="smoke", out=tmp_path / "one", device="cpu", echo=lambda _: None)
    by = {(r["row"], r["column"]): r for r in rows}
    assert by[("Local Model", "MSMT17")] | {} == {"row": "Local Model", "column": "MSMT17", "privreid": None,
                                                 "failed": 1, "published": 48.3, "difference": None,
                                                 "status": "failed"}
    assert by[("Standalone Training", "MSMT17")]["privreid"] == 25.0 and "failed" not in by[
        ("Standalone Training", "MSMT17")]
    table = (tmp_path / "one" / "table.md").read_text()
    assert "| Local Model | failed (48.3) |" in table and "failed = every seed's run failed" in table
