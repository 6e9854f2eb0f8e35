"""Every evaluation path ranks a test set by its own protocol: eval, attack's and corruption's clean rows agree.

Regression (issue 11, bug 1): ``privreid attack`` and corrupted evaluation ranked SYSU-MM01 with the
Market-1501 rules (no single-shot gallery trials, image CMC, no cam3/cam2 co-location), so their "Clean"
rows disagreed with ``privreid eval`` on the same checkpoint.
"""

from __future__ import annotations

import json
import re
import zlib

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from privreid.checkpoint import load_model
from privreid.cli import app
from privreid.data.catalog import resolve_datasets
from privreid.data.partition import as_test_set
from privreid.evaluation.metrics import evaluate
from privreid.evaluation.cross_modality import mode_split
from privreid.data.types import TestSet
from privreid.errors import ConfigError
from privreid.evaluation.model_eval import resolve_testsets, sample_features

from test_vi_formats import write_sysu

runner = CliRunner()
KEYS = ("rank1", "mAP", "mINP")


def noise_image(path, grey: bool = False) -> None:
    """A 32x16 image whose content is a pure function of its path (grey for the infrared cameras)."""
    rng = np.random.default_rng(zlib.crc32(str(path.relative_to(path.parents[2])).encode()))
    pixels = rng.integers(0, 256, size=(32, 16, 1 if grey else 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels[..., 0] if grey else pixels).convert("RGB").save(path)


def invoke(*args):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res


@pytest.fixture(scope="module")
def sysu_run(tmp_path_factory):
    """SYSU-MM01 with 8 test identities (two missing from infrared camera 3) and a checkpoint trained on it."""
    tmp = tmp_path_factory.mktemp("eval_paths")
    root = write_sysu(tmp / "sysu", train=(1, 2), val=(3,), test=tuple(range(4, 12)),
                      missing=((5, 3), (5, 4), (9, 3), (10, 1)), write=noise_image)
    invoke("train", "--method", "centralized", "--protocol", "by-dataset", "--rounds", 1, "--data", root, "--height", 32,
           "--width", 16, "--feat-dim", 16, "--batch-size", 8, "--max-steps", 1, "--device", "cpu", "--quiet",
           "--out", tmp / "run")
    return root, tmp / "run" / "ckpt.pt"


def test_eval_attack_and_corruption_clean_rows_agree_on_sysu(sysu_run, tmp_path):
    root, ckpt = sysu_run
    invoke("eval", "--model", ckpt, "--data", root, "--device", "cpu", "--json", tmp_path / "eval.json")
    [row] = json.loads((tmp_path / "eval.json").read_text())
    [(name, ds)] = resolve_datasets([str(root)]).items()
    assert row["testset"] == name and ds.vi_protocol.gallery_trials == row["trials"] == 10  # SYSU's trials

    invoke("attack", "--model", ckpt, "--data", root, "--method", "fgsm", "--eps", "2/255", "--examples", 0,
           "--device", "cpu", "--out", tmp_path / "attack")
    [attacked] = json.loads((tmp_path / "attack" / "results.json").read_text())["results"]

    invoke("eval", "--model", ckpt, "--data", root, "--corruption", "fog", "--repeats", 1, "--device", "cpu",
           "--json", tmp_path / "corrupted.json")
    [corrupted] = json.loads((tmp_path / "corrupted.json").read_text())

    for key in KEYS:
        assert attacked[f"clean_{key}"] == pytest.approx(row[key], abs=1e-9), key
        assert corrupted["clean"][key] == pytest.approx(row[key], abs=1e-9), key
    assert corrupted["clean"]["trials"] == 10 and corrupted["repeats"][0]["trials"] == 10

    # the fixture tells the protocols apart: Market-1501 rules on the same features give other numbers
    ts = as_test_set(name, ds)
    query, gallery = mode_split(ts)
    net = load_model(ckpt)
    qf, q_pids, q_cams = sample_features(net, ts, query, height=32, width=16)
    gf, g_pids, g_cams = sample_features(net, ts, gallery, height=32, width=16)
    market = evaluate(qf, gf, q_pids, g_pids, q_cams, g_cams)
    assert any(abs(market[key] - row[key]) > 1e-3 for key in KEYS), (market, row)


def test_resolve_testsets_keeps_the_named_domains_in_their_order():
    """The one domain picker of eval, attack and the API: every test set, or those named (a list or a comma list),
    in the order named; an unknown or empty selection is one ConfigError naming what is available."""
    a, b = TestSet("a", [], []), TestSet("b", [], [])
    assert [t.name for t in resolve_testsets([a, b])] == ["a", "b"] and resolve_testsets([]) == []
    assert [t.name for t in resolve_testsets([a, b], " b, a")] == ["b", "a"] and resolve_testsets(a, ["a"]) == [a]
    for domains, says in (("a,c", "unknown domain(s) c; available: a, b"), (",", "unknown domain(s) (none given)")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            resolve_testsets([a, b], domains)
