"""The further reproducible tables: their cells build the intended runs (fast), and each runs end to end at smoke
scale (slow: every one trains several runs)."""

from __future__ import annotations

import json

import pytest

from privreid.commands.sweep import base_config
from privreid.reproduce import run_table
from privreid.reproduce.tables import FIG3_BETAS, TABLES


def _smoke_config(key: str, row: str, group: str):
    [spec_row] = [r for r in TABLES[key].rows if r.name == row]
    return base_config(spec_row.train[group]["smoke"])


def test_fedreid_fig3_cells_are_fedreid_runs_with_the_cell_beta_and_mode():
    for row, mode in (("Single (Eq. 14)", "upload"), ("Double (Eq. 14+15)", "both")):
        for beta in FIG3_BETAS:
            cfg = _smoke_config("fedreid-fig3", row, f"beta={beta}")
            assert (cfg.train.method, cfg.train.beta, cfg.train.beta_mode) == ("fedreid", float(beta), mode)
    assert [c.source for c in TABLES["fedreid-fig3"].columns] == [("dg", "viper")] * len(FIG3_BETAS)


@pytest.mark.slow
def test_fedreid_fig3_smoke_end_to_end(tmp_path):
    out = tmp_path / "fig3"
    rows = run_table("fedreid-fig3", scale="smoke", out=out, device="cpu", echo=lambda _: None)
    ran = [r for r in rows if r["status"] == "run"]
    assert len(ran) == 2 * len(FIG3_BETAS) and all(0 <= r["privreid"] <= 100 for r in ran)
    for r in ran:
        run = out / "runs" / f"{r['column']}-{r['row']}"
        evaluation = json.loads((run / f"eval-{r['column']}.json").read_text())
        assert r["privreid"] == round(100 * evaluation["rank1"], 2) and len(evaluation["per_split"]) == 10
    assert {r["privreid"] for r in rows if r["row"] in ("Supervised", "Random-Guess")} == {None}
    assert (out / "figure.png").stat().st_size > 0
