"""The synthetic stand-ins of the small DG benchmarks (privreid.data.synthetic_dg)."""

from __future__ import annotations

import hashlib

from privreid.data.catalog import resolve_datasets
from privreid.data.formats import detect_format
from privreid.data.formats.dg import load_pool
from privreid.data.formats.dg.splits import make_splits
from privreid.data.synthetic import SynthConfig
from privreid.data.synthetic_dg import (
    SEED_OFFSET,
    SynthDGConfig,
    _distractor_images,
    _paired,
    generate_synthetic_dg,
    standin_roots,
)

SMALL = SynthDGConfig(people=8, distractors=6, ilids_images=4, height=32, width=16)


def _digest(root):
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
                                   and p.name != "manifest.json")).hexdigest()


def test_paired_people_and_distractor_images_of_a_rendered_domain():
    people = {7: {1: ["7a"], 2: ["7b"]}, 0: {2: ["d1", "d2"], 1: ["d3"]}, 3: {1: ["3a"]}, 5: {2: ["5b"], 1: ["5a"]},
              2: {1: ["2a", "2c"], 2: ["2b"]}}
    assert _paired(people, SynthDGConfig(people=8)) == [2, 5, 7]  # by pid; 3 has one camera, 0 are distractors
    assert _paired(people, SynthDGConfig(people=2)) == [2, 5]
    assert _distractor_images(people) == ["d1", "d2", "d3"]  # camera by camera, as rendered
    assert _distractor_images({1: {1: ["a"], 2: ["b"]}}) == []


def test_standins_follow_the_real_layouts_and_protocol(tmp_path):
    root = generate_synthetic_dg(tmp_path / "dg", SMALL)
    roots = standin_roots(root)
    assert set(roots) == {"synth-viper", "synth-grid", "synth-ilids", "synth-prid", "synth-3dpes", "synth-caviar"}
    sizes = {}
    for name, (path, fmt) in roots.items():
        assert detect_format(path) == fmt  # read by the real loader
        pool = load_pool(path, fmt)
        split = make_splits(pool, "dg", num_splits=1)[0]
        sizes[name] = (len(pool.paired_ids), len(split.query), len(split.gallery))
    assert sizes == {"synth-viper": (8, 4, 4), "synth-grid": (8, 4, 10), "synth-ilids": (8, 4, 4),
                     "synth-prid": (8, 4, 10), "synth-3dpes": (8, 4, 4), "synth-caviar": (8, 4, 4)}
    prid_b = roots["synth-prid"][0] / "prid_2011" / "single_shot" / "cam_b"
    assert sorted(p.name for p in prid_b.iterdir())[-1] == "person_0014.png"  # 6 distractors after the 8 paired
    crosscam = make_splits(load_pool(*roots["synth-caviar"]), "crosscam", num_splits=1)[0]
    assert {c for _, _, c in crosscam.query} == {0} and len(crosscam.test_ids) == 8  # every image of view A
    assert sum(1 for _ in (roots["synth-ilids"][0] / "i-LIDS_Pedestrian" / "Persons").iterdir()) == 8 * 4


def test_standins_are_deterministic_and_seeded(tmp_path):
    first = _digest(generate_synthetic_dg(tmp_path / "a", SMALL))
    assert first == _digest(generate_synthetic_dg(tmp_path / "b", SMALL))
    other = SynthDGConfig(**{**SMALL.__dict__, "seed": 1})
    assert first != _digest(generate_synthetic_dg(tmp_path / "c", other))


def test_standins_never_share_the_embedded_federations_seed():
    assert SMALL.render_config().seed == SEED_OFFSET != SynthConfig().seed


def test_data_synth_dg_resolves_to_the_six_standins(tmp_path):
    root = generate_synthetic_dg(tmp_path / "dg", SMALL)
    datasets = resolve_datasets([str(root)])
    assert list(datasets) == ["synth-viper", "synth-grid", "synth-ilids", "synth-prid", "synth-3dpes", "synth-caviar"]
    assert all(ds.num_train_pids == 4 for ds in datasets.values())


def test_adding_standins_left_the_first_three_unchanged(tmp_path, monkeypatch):
    """The domains are rendered from per-domain seeds: the VIPeR / GRID / i-LIDS stand-ins are the images a
    generator with only those three writes (as before PRID / 3DPeS / CAVIAR joined)."""
    from privreid.data import synthetic_dg

    root = generate_synthetic_dg(tmp_path / "six", SMALL)
    first = {n: synthetic_dg.STANDINS[n] for n in ("synth-viper", "synth-grid", "synth-ilids")}
    monkeypatch.setattr(synthetic_dg, "STANDINS", first)
    three = generate_synthetic_dg(tmp_path / "three", SMALL)
    assert sorted(p.name for p in three.iterdir() if p.is_dir()) == sorted(first)
    assert all(_digest(root / n) == _digest(three / n) for n in first)
