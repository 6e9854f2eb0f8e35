"""Two paper tables end to end at smoke scale (FedReID Table II with the DG protocol; L2RW+ Table VII)."""

from __future__ import annotations

import csv
import json

from privreid.experiments.reproduce import run_table


def _csv(path):
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_fedreid_table2_smoke_end_to_end_and_resumes(tmp_path):
    out = tmp_path / "t2"
    rows = run_table("fedreid-table2", scale="smoke", out=out, device="cpu", echo=lambda _: None)
    by = {(r["row"], r["column"]): r for r in rows}
    for column in ("iLIDS", "VIPeR", "3DPeS", "CAVIAR", "PRID", "GRID"):  # the stand-ins, under the DG protocol
        cell = by[("FedReID", column)]
        assert 0 <= cell["privreid"] <= 100 and cell["difference"] == round(cell["privreid"] - cell["published"], 2)
        stand_in = f"synth-{column.lower()}"
        evaluation = json.loads((out / "runs" / "FedReID" / f"eval-{stand_in}.json").read_text())
        assert evaluation["protocol"] == "dg" and len(evaluation["per_split"]) == 10
        assert cell["privreid"] == round(100 * evaluation["rank1"], 2)
        assert len(json.loads((out / "runs" / "FedReID" / f"splits-{stand_in}.json").read_text())["splits"]) == 10
    assert by[("DIMN", "VIPeR")] | {} == {"row": "DIMN", "column": "VIPeR", "privreid": None, "published": 51.2,
                                         "difference": None, "status": "not implemented"}
    table = (out / "table.md").read_text()
    assert "| DIMN | n/i (70.2) | n/i (51.2) |" in table
    assert len(_csv(out / "table.csv")) == 11 * 6
    ckpt = out / "runs" / "FedReID" / "ckpt.pt"
    before = ckpt.stat().st_mtime_ns
    again = run_table("fedreid-table2", scale="smoke", out=out, device="cpu", echo=lambda _: None)
    assert again == rows and ckpt.stat().st_mtime_ns == before  # finished cells are skipped


def test_l2rw_table7_smoke_end_to_end(tmp_path):
    out = tmp_path / "t7"
    rows = run_table("l2rw-table7", scale="smoke", out=out, device="cpu", echo=lambda _: None)
    runs = sorted(p.name for p in (out / "runs").iterdir() if p.is_dir() and p.name[0] != ".")
    assert runs == ["SYSU-B", "SYSU-B+CA", "SYSU-B+CA+MRB (I-DPPT)", "SYSU-B+gray"]
    options = {name: json.loads((out / "runs" / name / "summary.json").read_text()) for name in runs}
    for name, summary in options.items():
        r1 = next(r for r in rows if r["column"] == "SYSU R1" and f"SYSU-{r['row']}" == name)
        assert r1["privreid"] == round(100 * summary["global_seen"]["rank1"], 2)
        assert r1["published"] is not None
    assert all(r["privreid"] is None for r in rows if r["column"].startswith("LLCM"))  # no LLCM stand-in
    assert "| B+CA+MRB (I-DPPT) |" in (out / "table.md").read_text()
