"""Detection metrics (issue 43, item 3): a defense's selection record against the clients that attacked."""

from __future__ import annotations

import json
from types import SimpleNamespace

from conftest import tiny_config
from privreid.composition import build_run
from privreid.config import FederationConfig, RobustnessConfig, RunConfig
from privreid.data.catalog import federation_for_config
from privreid.federated.engine import FederatedEngine
from privreid.federated.strategy import DataVolumeAverage, RoundResult
from privreid.malicious_clients import AdversaryRecord, settings_of
from privreid.malicious_clients.detection import detection_totals

CLIENTS = [SimpleNamespace(name=n) for n in "abcde"]


def _defense(rejected, accepted, name="robust-krum"):
    return {"scope": "defense", "defense": name, "rejected": rejected, "accepted": accepted}


def test_a_selection_record_becomes_tp_fp_fn_tn_against_the_round_s_attackers():
    config = RunConfig(federation=FederationConfig(rounds=2),
                       robustness=RobustnessConfig(adversary={"name": "sign-flip", "malicious": 2, "rounds": "1:1"}))
    record = AdversaryRecord(*settings_of(config), CLIENTS, config)
    # round 1: d and e are malicious, e is not selected: d attacks; the rule rejects d and a, keeps b and c
    record.before_round(0, CLIENTS[:4])
    record.on_round_result(1, RoundResult({}, records=[_defense(["d", "a"], ["b", "c"]), {"scope": "secagg"}]))
    first = record.after_round(1)
    assert first == [{"round": 1, "scope": "detection", "defense": "robust-krum", "tp": 1, "fp": 1, "fn": 0, "tn": 2,
                      "tpr": 1.0, "fpr": 1 / 3, "attacking": ["d"]}]
    assert record.after_round(1) == []  # each result is reported once
    # round 2, outside the window: no attacker, TPR null, FPR 1/4 (b rejected, a, c, d kept)
    record.before_round(1, CLIENTS[:4])
    record.on_round_result(2, RoundResult({}, records=[_defense(["b"], ["a", "c", "d"])]))
    second = record.after_round(2)
    assert second == [{"round": 2, "scope": "detection", "defense": "robust-krum", "tp": 0, "fp": 1, "fn": 0, "tn": 3,
                       "tpr": None, "fpr": 0.25, "attacking": []}]
    # over the run: tp 1, fp 2, fn 0, tn 5
    totals = detection_totals([*first, {"scope": "train"}, *second])
    assert totals == {"robust-krum": {"tp": 1, "fp": 2, "fn": 0, "tn": 5, "tpr": 1.0, "fpr": 2 / 7}}
    assert detection_totals([]) == {}


def test_a_run_records_detection_per_round_and_its_totals(tiny_synth, tmp_path, monkeypatch):
    """A stub server that rejects the last client in round 1 and the first in round 2 (the attack: round 1 only)."""
    original, rounds = DataVolumeAverage.accumulator, []

    def stub(self, global_state):
        inner, names = original(self, global_state), []
        rounds.append(names)

        class Stub:
            def add(self, upload):
                names.append(upload.client)
                inner.add(upload)

            def result(self):
                rejected = names[-1] if len(rounds) == 1 else names[0]
                return RoundResult(inner.result().global_state, records=[
                    _defense([rejected], [n for n in names if n != rejected], "stub")])
        return Stub()

    monkeypatch.setattr(DataVolumeAverage, "accumulator", stub)
    cfg = tiny_config(tiny_synth, adversary={"name": "sign-flip", "malicious": 1, "rounds": "1:1"})
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=lambda s: None,
                             build=build_run)
    engine.run()
    first, last = (c.name for c in engine.clients)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    detection = [r for r in records if r.get("scope") == "detection"]
    assert detection == [
        {"round": 1, "scope": "detection", "defense": "stub", "tp": 1, "fp": 0, "fn": 0, "tn": 1, "tpr": 1.0,
         "fpr": 0.0, "attacking": [last]},
        {"round": 2, "scope": "detection", "defense": "stub", "tp": 0, "fp": 1, "fn": 0, "tn": 1, "tpr": None,
         "fpr": 0.5, "attacking": []}]
    assert [r for r in records if r.get("scope") == "defense"][0]["rejected"] == [last]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["adversary"]["detection"] == {"stub": {"tp": 1, "fp": 1, "fn": 0, "tn": 2, "tpr": 1.0,
                                                          "fpr": 1 / 3}}
