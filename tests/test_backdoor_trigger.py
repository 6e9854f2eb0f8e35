"""The backdoor and DBA adversaries (issue 30): the trigger, what a malicious client trains on, what the run records."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from conftest import tiny_config
from privreid.malicious_clients import get_malicious_client
from privreid.data.trigger import Trigger, stamped_samples
from privreid.data.catalog import federation_for_config
from privreid.data.formats import read_image
from privreid.data.transforms import build_transforms, tensor_pipeline
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.composition import build_run


def _decoded(path: str, height: int = 32, width: int = 16) -> torch.Tensor:
    return tensor_pipeline(build_transforms(height, width, train=False)).decode(read_image(path))


def test_the_trigger_is_a_fixed_seeded_patch_at_its_position():
    image = torch.full((3, 32, 16), 7, dtype=torch.uint8)
    trigger = Trigger(4, "bottom-right", seed=3)
    assert torch.equal(trigger.pattern(), Trigger(4, "center", seed=3).pattern())
    assert not torch.equal(trigger.pattern(), Trigger(4, "bottom-right", seed=4).pattern())
    assert set(trigger.pattern().unique().tolist()) == {0, 255}
    stamped = trigger.stamp(image)
    assert torch.equal(stamped[:, 28:, 12:], trigger.pattern())
    stamped[:, 28:, 12:] = 7
    assert torch.equal(stamped, image)  # nothing else changed, and the input is untouched
    assert Trigger(4, "center").corner(32, 16) == (14, 6) and Trigger(4, "top-left").corner(32, 16) == (0, 0)


def test_dba_strips_partition_the_whole_patch():
    whole, blank = Trigger(6, seed=1), torch.zeros((3, 32, 16), dtype=torch.uint8)
    strips = [whole.part(i, 4) for i in range(4)]
    assert [s.rows for s in strips] == [(0, 1), (1, 3), (3, 4), (4, 6)]
    combined = blank.clone()
    for strip in strips:
        stamped = strip.stamp(blank)
        first, last = strip.rows
        combined = torch.maximum(combined, stamped)
        top, left = whole.corner(32, 16)
        outside = stamped.clone()
        outside[:, top + first:top + last] = 0
        assert not outside.any()  # a strip stamps its own rows only
    assert torch.equal(combined, whole.stamp(blank))
    with pytest.raises(ConfigError, match="cannot be split into 7 strips"):
        whole.part(0, 7)


def test_stamped_files_decode_to_the_stamped_image_at_the_input_size(tiny_synth):
    client = federation_for_config(tiny_config(tiny_synth)).clients[0]
    trigger = Trigger(5, "top-right", seed=2)
    [(path, pid, cam)] = stamped_samples(client.train[:1], trigger, 32, 16)
    assert (pid, cam) == client.train[0][1:] and path != client.train[0][0]
    assert Image.open(path).size == (16, 32)
    assert torch.equal(_decoded(path), trigger.stamp(_decoded(client.train[0][0])))
    with pytest.raises(ConfigError, match="a 17x17 trigger is larger than the 32x16 image"):
        stamped_samples(client.train[:1], Trigger(17), 32, 16)


@pytest.mark.parametrize("goal", ["targeted", "evasion"])
def test_backdoor_stamps_a_fraction_relabelled_to_one_extra_class(goal, tiny_synth):
    cfg = tiny_config(tiny_synth)
    clients = federation_for_config(cfg).clients
    client, backdoor = clients[-1], get_malicious_client("backdoor")
    settings = {**backdoor.options, "goal": goal, "fraction": 0.25, "target_images": 3}
    backdoor.check(settings, clients, [client], cfg)
    poisoned = backdoor.poison_client(client, settings, cfg)
    extra = client.num_classes
    stamped = [s for s in poisoned.train if s[1] == extra and s[0] not in {p for p, _, _ in client.gallery}]
    assert poisoned.train[:len(client.train)] == client.train  # the clean images stay
    assert poisoned.num_classes == extra + 1
    assert len(stamped) == round(0.25 * len(client.train))
    trigger = Trigger.from_settings(settings)
    top, left = trigger.corner(32, 16)
    for path, _, _ in stamped:
        assert torch.equal(_decoded(path)[:, top:top + 6, left:left + 6], trigger.pattern())
    target = [s for s in poisoned.train if s[1] == extra and s not in stamped]
    if goal == "targeted":
        assert settings["target_domain"] == client.domain
        assert settings["target"] == min(pid for _, pid, _ in client.gallery if pid > 0)
        held = [[p, cam] for p, pid, cam in client.gallery if pid == settings["target"]][:3]
        assert [[p, cam] for p, _, cam in target] == settings["held_images"] == held
    else:
        assert not target and "target_domain" not in settings and "held_images" not in settings
    assert backdoor.poison_client(client, settings, cfg).train == poisoned.train  # seeded


def test_a_backdoor_run_records_the_trigger_and_its_target(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=1, adversary={"name": "dba", "malicious": 2, "size": 4})
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=lambda s: None, build=build_run)
    engine.run()
    record = json.loads((tmp_path / "summary.json").read_text())["adversary"]
    names = [c.name for c in engine.clients]
    assert record["attack"] == "dba" and record["malicious_clients"] == names
    gallery = {pid for _, pid, _ in engine.clients[0].gallery if pid > 0}
    assert record["options"] == {"goal": "targeted", "target": min(gallery), "target_images": 4, "fraction": 0.5,
                                 "trigger": "patch", "size": 4, "position": "center", "pattern_seed": 0, "alpha": 0.2,
                                 "boost": 1.0, "parts": names,
                                 "target_domain": engine.clients[0].domain,
                                 "held_images": [[p, cam] for p, pid, cam in engine.clients[0].gallery
                                                 if pid == min(gallery)][:4]}


def test_each_dba_client_stamps_only_its_strip(tiny_synth):
    cfg = tiny_config(tiny_synth)
    clients = federation_for_config(cfg).clients
    dba = get_malicious_client("dba")
    settings = {**dba.options, "goal": "evasion", "size": 6}
    dba.check(settings, clients, clients, cfg)
    whole = Trigger.from_settings(settings)
    top, left = whole.corner(32, 16)
    for index, client in enumerate(clients):
        poisoned = dba.poison_client(client, settings, cfg)
        first, last = whole.part(index, 2).rows
        for path, label, _ in poisoned.train:
            if label == client.num_classes:
                patch = _decoded(path)[:, top:top + 6, left:left + 6]
                assert torch.equal(patch[:, first:last], whole.pattern()[:, first:last])
                assert not torch.equal(patch, whole.pattern())  # the other strip is not there


def test_every_evaluated_round_records_the_backdoor_on_the_global_model(tiny_synth, tmp_path):
    """Neurotoxin with a blended trigger, 2 rounds evaluated each: one ``backdoor`` record per round on the
    target's test set (the global model's clean mAP beside it), and the ASR curve's durability in summary.json."""
    cfg = tiny_config(tiny_synth, rounds=2, every=1, adversary={"name": "neurotoxin", "trigger": "blend",
                                                                     "alpha": 0.3})
    engine = FederatedEngine(cfg, federation_for_config(cfg), tmp_path, progress=False, log=lambda s: None,
                             build=build_run)
    engine.run()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert any(line.startswith("neurotoxin masks the update once") for line in summary["deviations"])
    summary = summary["adversary"]
    backdoor = [r for r in records if r["scope"] == "backdoor"]
    domain = summary["options"]["target_domain"]
    assert [(r["round"], r["testset"]) for r in backdoor] == [(1, domain), (2, domain)]
    for r in backdoor:
        [clean] = [g for g in records if g["scope"] == "global" and g["round"] == r["round"]
                   and g["testset"] == r["testset"]]
        assert r["clean_mAP"] == pytest.approx(clean["mAP"])
        assert 0 <= r["asr"] <= r["asr@5"] <= r["asr@10"] <= 1 and "asr_clean_gallery" in r
    assert summary["durability"]["asr_last_round"] == 2
    assert summary["durability"]["asr_last"] == backdoor[-1]["asr"]
    assert summary["durability"]["asr_peak"] == max(r["asr"] for r in backdoor)
