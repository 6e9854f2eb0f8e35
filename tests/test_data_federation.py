"""Federations of datasets in different layouts: each --data root in its own format (detected, or DIR:FORMAT),
the small DG benchmarks as training clients (FedPav's nine-client split, paper 004 Table 1; CUHK02 for FedARKS),
`privreid data info`'s check against FedPav's Table 1, and every paper table runnable at paper scale."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from privreid.cli import app
from privreid.data.catalog import build_federation, load_datasets, parse_data_spec, resolve_datasets
from privreid.data.formats import load_dataset
from privreid.data.formats.dg import load_pool
from privreid.data.formats.dg.splits import make_splits, train_samples
from privreid.data.published_counts import FEDPAV_TABLE1, check_counts
from privreid.errors import ConfigError

from test_dg_formats import (_img, make_3dpes, make_caviar, make_cuhk01, make_cuhk02, make_grid, make_ilids, make_prid,
                             make_viper)
from test_formats import DUKE, make_cuhk, make_market, make_msmt

runner = CliRunner()


def test_each_root_is_read_in_its_own_detected_format(tmp_path):
    """One federation of four layouts, --format auto: every root detected on its own, one client each."""
    roots = [make_market(tmp_path / "market"), make_cuhk(tmp_path / "cuhk03"), make_viper(tmp_path / "viper", 8),
             make_prid(tmp_path / "prid", 6, 9)]
    loaded = load_datasets([str(r) for r in roots])
    assert {name: item.format for name, item in loaded.items()} == {
        "market": "market1501", "cuhk03": "cuhk03np-detected", "viper": "viper", "prid": "prid"}
    federation = build_federation([str(r) for r in roots])
    assert sorted(c.domain for c in federation.clients) == ["cuhk03", "market", "prid", "viper"]


def test_dir_format_names_one_roots_format_and_overrides_format(tmp_path):
    cuhk = make_cuhk(tmp_path / "cuhk03")
    viper = make_viper(tmp_path / "viper", 8)
    loaded = load_datasets([f"{cuhk}:cuhk03np-labeled", f"{viper}:viper-fedpav"], fmt="market1501")
    assert {name: item.format for name, item in loaded.items()} == {"cuhk03": "cuhk03np-labeled",
                                                                    "viper": "viper-fedpav"}
    assert loaded["cuhk03"].dataset.num_train_pids == 3  # labeled/ holds 3 train ids, detected/ 2
    assert loaded["cuhk03"].spec == f"{cuhk}:cuhk03np-labeled"
    # without :FORMAT, --format applies to the root
    with pytest.raises(Exception, match="market1501|bounding_box_train"):
        load_datasets([str(viper)], fmt="market1501")


def test_a_path_with_a_colon_is_a_path_unless_the_suffix_is_a_format(tmp_path):
    odd = make_market(tmp_path / "cams:2019")
    assert parse_data_spec(str(odd)).format is None
    assert list(resolve_datasets([str(odd)])) == ["cams:2019"]
    assert parse_data_spec(f"{odd}:market1501").root == str(odd)
    assert parse_data_spec("/nowhere/x:regdb-3").format == "regdb-3"  # a variant spelling is a format


@pytest.mark.parametrize("spec,message", [
    ("{root}:viperr", "'viperr' is not a dataset format"),
    ("{root}:grid-fedpav", "'grid-fedpav' is not a dataset format"),  # FedPav's split is for its five clients
    ("synth:market1501", "the embedded dataset 'synth' takes no :FORMAT"),
])
def test_bad_format_suffix_is_one_line(tmp_path, spec, message):
    root = make_viper(tmp_path / "viper", 4)
    spec = spec.format(root=root)
    with pytest.raises(ConfigError, match=message) as info:
        parse_data_spec(spec)
    assert "\n" not in str(info.value)
    for command in (["data", "info", spec], ["train", "--data", spec, "--dry-run"]):
        res = runner.invoke(app, command)
        assert res.exit_code == 2 and message in res.output and res.output.count("\n") == 1, command


def test_train_dry_run_evaluates_each_client_of_a_mixed_federation(tmp_path):
    market, viper = make_market(tmp_path / "market"), make_viper(tmp_path / "viper", 8)
    res = runner.invoke(app, ["train", "--data", str(market), "--data", f"{viper}:viper-fedpav", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "market (seen): Market-1501 rules: 2 queries x 4 gallery images" in res.output
    assert "viper (seen): Market-1501 rules: 4 queries x 4 gallery images" in res.output  # FedPav's split: 8 -> 4


def test_dg_benchmarks_train_clients_with_their_own_labels(tmp_path):
    """VIPeR (FedPav's split), CUHK01 and CUHK02 (FedARKS: P1-P4, every image) as clients of one federation."""
    roots = [f"{make_viper(tmp_path / 'viper', 10)}:viper-fedpav", str(make_cuhk01(tmp_path / "cuhk01", 6)),
             str(make_cuhk02(tmp_path / "cuhk02"))]
    federation = build_federation(roots)
    clients = {c.domain: c for c in federation.clients}
    assert set(clients) == {"viper", "cuhk01", "cuhk02"}
    # VIPeR 10 -> 5 train people, both images; CUHK01 6 -> 3 (dg split); CUHK02 P1-P4: 9 people, 4 images each
    expected = {"viper": (5, 10), "cuhk01": (3, 12), "cuhk02": (9, 36)}
    for name, client in clients.items():
        labels = sorted({pid for _, pid, _ in client.train})
        assert (client.num_classes, len(client.train)) == expected[name], name
        assert labels == list(range(client.num_classes)), name  # relabelled 0..N-1 within each client
    assert all("P5" not in path for path, _, _ in clients["cuhk02"].train)


def test_fedpav_split_of_prid_trains_on_the_camera_a_only_people(tmp_path):
    """PRID: 100 of the 200 paired people test (query 100, gallery 100 + 549 distractors); the other 100 and the
    185 camera-A-only people train (DGD's trainval, FedPav's train_all)."""
    pool = load_pool(make_prid(tmp_path), "prid")
    split = make_splits(pool, "fedpav", num_splits=1)[0]
    assert len(split.test_ids) == 100 and set(split.test_ids) <= set(range(1, 201))
    assert len(split.train_ids) == 285 and set(range(201, 386)) <= set(split.train_ids)
    assert (len(split.query), len(split.gallery)) == (100, 649)
    # the dg protocol's test is unchanged by the camera-A-only people: it still draws among the paired ones
    assert all(len(s.test_ids) == 100 and max(s.test_ids) <= 200 for s in make_splits(pool, "dg", num_splits=3))


def test_fedpav_split_of_3dpes_puts_one_camera_test_people_in_the_gallery(tmp_path):
    pool = load_pool(make_3dpes(tmp_path), "3dpes")  # 4 people; person 2 has one camera
    for split in make_splits(pool, "fedpav", num_splits=10):
        assert len(split.test_ids) == 4 and not split.train_ids  # min(100, 4)
        assert {pid for _, pid, _ in split.query} == {1, 3, 4}
        assert {pid for _, pid, _ in split.gallery} == {1, 2, 3, 4}


def test_fedpav_split_of_ilids_halves_each_test_persons_images(tmp_path):
    pool = load_pool(make_ilids(tmp_path), "ilids")  # 119 people, 476 images (4 each)
    split = make_splits(pool, "fedpav", num_splits=1)[0]
    assert (len(split.train_ids), len(split.test_ids)) == (59, 60)
    assert (len(split.query), len(split.gallery)) == (120, 120)
    assert not {p for p, _, _ in split.query} & {p for p, _, _ in split.gallery}


@pytest.mark.parametrize("fmt,build", [("viper-fedpav", make_viper), ("cuhk01-fedpav", lambda r: make_cuhk01(r, 971))])
def test_fedpav_split_matches_table1_on_full_size_trees(tmp_path, fmt, build):
    """VIPeR and CUHK01 have one person count per view, so every count of FedPav's Table 1 is reproduced."""
    ds = load_dataset(build(tmp_path), fmt)
    assert check_counts(fmt, ds) == ["every count matches FedPav Table 1 (paper 004)"]


def test_check_counts_flags_a_difference_and_says_why(tmp_path):
    ds = load_dataset(make_prid(tmp_path), "prid-fedpav")
    lines = check_counts("prid-fedpav", ds)
    assert len(lines) == 1 and lines[0].startswith(
        "train images: 385 != 3,744 in FedPav Table 1 (paper 004) (FedPav's clients train on up to 10 frames per "
        "camera of each person's multi_shot sequence (Cysu/dgd_person_reid data/format_prid.py): without multi_shot/")
    # the dg split is not FedPav's: not compared, the spelling that is is named
    assert check_counts("prid", load_dataset(tmp_path, "prid")) == [
        "FedPav Table 1 (paper 004) splits this dataset as --data DIR:prid-fedpav; read as prid, its counts are "
        "not compared"]
    assert check_counts("grid", load_dataset(make_grid(tmp_path / "g", 4, 2), "grid")) == []


def test_data_info_prints_each_roots_format_counts_and_table1_check(tmp_path):
    viper = make_viper(tmp_path / "viper")
    market = make_market(tmp_path / "market")
    res = runner.invoke(app, ["data", "info", f"{viper}:viper-fedpav", str(market)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert f"== viper ({viper / 'viper' / 'VIPeR'}) format: viper-fedpav" in out
    assert f"== market ({market}) format: market1501" in out
    assert "every count matches FedPav Table 1 (paper 004)" in out
    # the fixture's Market holds 3 train people: flagged against the paper's 751
    assert "train identities: 3 != 751 in FedPav Table 1 (paper 004)" in out
    assert "gallery images: 4 != 19,732 in FedPav Table 1 (paper 004) (the paper counts every file" in out
    assert "gallery identities: 3 != 751 in FedPav Table 1 (paper 004)\n" in out  # no reason known: none given


def test_data_formats_lists_every_spelling():
    res = runner.invoke(app, ["data", "formats"])
    assert res.exit_code == 0
    assert "prid, prid-fedpav: root/prid_2011/single_shot" in res.output
    assert "cuhk03np, cuhk03np-{detected,labeled}: " in res.output


def _paper_tree(root: Path) -> Path:
    """Every dataset FedPav's and FedARKS' paper-scale runs read, as tiny trees under --data-root."""
    make_msmt(root / "msmt17")
    make_market(root / "dukemtmcreid", DUKE)
    make_market(root / "market1501")
    make_cuhk(root / "cuhk03np")
    make_prid(root / "prid")  # full size: FedPav's split tests on 100 of the 200 paired people
    make_cuhk01(root / "cuhk01", 6)
    make_viper(root / "viper", 8)
    for pid in range(1, 105):  # 3DPeS: FedPav's split tests on 100 people, 4 train
        for cam in (1, 2):
            _img(root / "3dpes" / "3DPeS" / "RGB" / f"{pid:03d}_{cam}_20100611_0001.bmp")
    make_ilids(root / "ilids", 6, 18)
    make_cuhk02(root / "cuhk02")
    make_caviar(root / "caviar")
    make_grid(root / "grid", 4, 2)
    return root


def test_every_table_runs_at_paper_scale(tmp_path):
    """`reproduce --list` shows a run count at paper scale for all 13 tables, and each paper-scale data check passes
    on tiny trees in the expected layouts."""
    from privreid.experiments.reproduce import TABLES, check_table

    res = runner.invoke(app, ["reproduce", "--list"])
    assert res.exit_code == 0 and "not runnable" not in res.output
    assert len(TABLES) == 13
    data_root = _paper_tree(tmp_path / "data")
    for key in ("fedpav-table3", "fedpav-table4", "fedpav-table5", "fedarks-table1", "fedarks-table3"):
        assert check_table(key, "paper", data_root) is TABLES[key]


def test_paper_scale_checks_each_folder_in_its_clients_format(tmp_path):
    import shutil

    data_root = _paper_tree(tmp_path / "data")
    shutil.rmtree(data_root / "prid")
    (data_root / "prid" / "elsewhere").mkdir(parents=True)
    res = runner.invoke(app, ["reproduce", "fedpav-table3", "--scale", "paper", "--data-root", str(data_root),
                              "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert f"dataset {data_root / 'prid'} is not in the prid-fedpav layout (root/prid_2011/single_shot/" in res.output


def test_fedpav_paper_run_is_the_nine_client_federation(tmp_path):
    """The paper-scale run spec builds nine clients, each root in its own format (the five small ones in
    FedPav's client split), and hands CUHK02 to CC / CDW / KD as the public set."""
    from privreid.data.catalog import federation_for_config
    from privreid.experiments.reproduce import TABLES

    data_root = _paper_tree(tmp_path / "data")
    cc = next(r for r in TABLES["fedpav-table4"].rows if r.name == "CC & CDW")
    config = cc.train[""]["paper"].config(data_root, "cpu")
    assert config.federation.method_options["public_data"] == f"{data_root}/cuhk02:cuhk02"
    assert list(resolve_datasets([config.federation.method_options["public_data"]])) == ["cuhk02"]
    loaded = load_datasets(config.data.roots, config.data.format)
    assert {name: item.format for name, item in loaded.items()} == {
        "msmt17": "msmt17", "dukemtmcreid": "dukemtmcreid", "market1501": "market1501",
        "cuhk03np": "cuhk03np-detected", "prid": "prid-fedpav", "cuhk01": "cuhk01-fedpav",
        "viper": "viper-fedpav", "3dpes": "3dpes-fedpav", "ilids": "ilids-fedpav"}
    assert set(FEDPAV_TABLE1) == {item.format for item in loaded.values()}
    federation = federation_for_config(config)
    assert sorted(c.domain for c in federation.clients) == sorted(loaded)
    assert {name: item.dataset.num_train_pids for name, item in loaded.items() if name in ("prid", "3dpes")} == {
        "prid": 285, "3dpes": 4}


def test_fedarks_paper_runs_train_on_cuhk02_and_hold_one_domain_out(tmp_path):
    """FedARKS Table 1's paper-scale tasks: the three other domains train (CUHK02: P1-P4, every image), the
    task's domain is the unseen test set."""
    from privreid.data.catalog import federation_for_config
    from privreid.experiments.reproduce import TABLES

    data_root = _paper_tree(tmp_path / "data")
    row = next(r for r in TABLES["fedarks-table1"].rows if r.name == "FedARKS")
    for task, held_out in (("MS+C2+C3→M", "market1501"), ("M+C2+C3→MS", "msmt17"), ("MS+C2+M→C3", "cuhk03np")):
        federation = federation_for_config(row.train[task]["paper"].config(data_root, "cpu"))
        assert sorted(c.domain for c in federation.clients) == sorted(
            {"market1501", "cuhk02", "cuhk03np", "msmt17"} - {held_out}), task
        assert [t.name for t in federation.unseen] == [held_out], task
        cuhk02 = next(c for c in federation.clients if c.domain == "cuhk02")
        assert (cuhk02.num_classes, len(cuhk02.train)) == (9, 36)  # make_cuhk02: P1-P4 hold 9 people, 4 images each


def test_fedpav_split_of_prid_trains_on_up_to_ten_frames_of_each_sequence(tmp_path):
    """With the release's multi_shot/ sequences, a train person contributes up to 10 frames per camera (DGD's
    draw); camera B's sequence only for the paired persons (person_0201 of cam_b is someone else)."""
    root = make_prid(tmp_path)
    multi = root / "prid2011" / "prid_2011" / "multi_shot"
    for cam, persons in (("cam_a", 385), ("cam_b", 749)):
        for pid in range(1, persons + 1):
            for n in range(1, 13 if pid % 2 else 7):  # odd persons: 12 frames, even ones: 6
                _img(multi / cam / f"person_{pid:04d}" / f"{n:04d}.png")
    pool = load_pool(root, "prid")
    split = make_splits(pool, "fedpav", num_splits=1)[0]
    ds = load_dataset(root, "prid-fedpav")
    train_pids = split.train_ids
    per_cam = {pid: min(10, 12 if pid % 2 else 6) for pid in train_pids}
    expected = sum(2 * per_cam[pid] if pid <= 200 else per_cam[pid] for pid in train_pids)
    assert len(ds.train) == expected and ds.num_train_pids == 285
    assert all("multi_shot" in path for path, _, _ in ds.train)
    assert not any("cam_b" in path for path, pid, _ in train_samples(pool, split) if pid > 200)
    # the test images stay the single-shot ones
    assert all("single_shot" in path for path, _, _ in ds.query + ds.gallery)
    assert ds.train == load_dataset(root, "prid-fedpav").train  # seeded


def test_reproduce_dry_run_plans_fedpavs_paper_runs_with_per_root_formats():
    import json

    res = runner.invoke(app, ["reproduce", "fedpav-table4", "--scale", "paper", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    assert [r["run"] for r in plan["runs"]] == sorted(["Benchmark", "FedNova", "FedProx", "CC", "CDW", "CC & CDW",
                                                        "Standalone"])
    for run in plan["runs"]:
        assert run["config"]["data"]["roots"] == [f"DATA_ROOT/{folder}:{fmt}" for folder, fmt in (
            ("msmt17", "msmt17"), ("dukemtmcreid", "dukemtmcreid"), ("market1501", "market1501"),
            ("cuhk03np", "cuhk03np-detected"), ("prid", "prid-fedpav"), ("cuhk01", "cuhk01-fedpav"),
            ("viper", "viper-fedpav"), ("3dpes", "3dpes-fedpav"), ("ilids", "ilids-fedpav"))], run["run"]
