"""Issue 40: the files torchreid's and fast-reid's own code write load, and rank as those projects rank.

The torchreid files are written by torchreid itself (``ImageSoftmaxEngine.save_model``, ``rank1`` a numpy
float32) and scored by torchreid's own pipeline (``FeatureExtractor``: its ``build_model``,
``load_pretrained_weights`` and test transform; ``metrics.compute_distance_matrix`` and ``evaluate_rank``).
fast-reid is not on PyPI: its ``Checkpointer.save`` layout is written with the same objects' state dicts
(tests/model_files.py), and its evaluation is rebuilt from its documented pieces (bicubic test resize,
cosine distance ``1 - q.g`` of normalised features, and the rank / mAP of ``evaluate_rank``, which fast-reid's
``fastreid/evaluation/rank.py`` ports from torchreid).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import privreid
from badinput import assert_one_error_line, run_cli
from model_files import fastreid_checkpointer_file, torchreid_engine_file
from privreid.evaluation.cross_modality import mode_split
from privreid.evaluation.model_eval import resolve_testsets

#: the evaluation size: twice the synthetic images' 32x16, so that the test resize matters
H, W = 64, 32
ARCHS = ("resnet50", "osnet_x1_0")


@pytest.fixture(scope="module")
def engine_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    return {arch: torchreid_engine_file(arch, root / arch) for arch in ARCHS}


@pytest.fixture(scope="module")
def synth_c(tiny_synth):
    [testset] = resolve_testsets(str(tiny_synth), "synthC")
    return testset


def _ids(samples):
    return np.array([pid for _, pid, _ in samples]), np.array([cam for _, _, cam in samples])


def _rank(distmat: np.ndarray, testset) -> tuple[float, float]:
    """torchreid's ``evaluate_rank`` (the Python path; fast-reid's rank.py is its port): (rank-1, mAP)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchreid.reid import metrics
    query, gallery = mode_split(testset)
    (q_pids, q_cams), (g_pids, g_cams) = _ids(query), _ids(gallery)
    cmc, mean_ap = metrics.evaluate_rank(distmat, q_pids, g_pids, q_cams, g_cams, use_metric_cuhk03=False)
    return float(cmc[0]), float(mean_ap)


def torchreid_own_numbers(path, arch: str, testset, metric: str) -> tuple[float, float]:
    """What torchreid's own code gives for the file: its feature extractor and its evaluator."""
    from privreid.pickle_scan import numpy_metadata_globals

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchreid.reid import metrics
        from torchreid.reid.utils import FeatureExtractor

        # torchreid's load_checkpoint calls torch.load, which refuses the numpy rank1 since torch 2.6 unless
        # allow-listed: the same allow-list privreid uses
        with torch.serialization.safe_globals(numpy_metadata_globals()):
            extractor = FeatureExtractor(arch, model_path=str(path), image_size=(H, W), device="cpu", verbose=False)
    query, gallery = mode_split(testset)
    qf, gf = extractor([p for p, _, _ in query]), extractor([p for p, _, _ in gallery])
    return _rank(metrics.compute_distance_matrix(qf, gf, metric).numpy(), testset)


def _eval_json(tmp_path, *args) -> dict:
    out = tmp_path / "eval.json"
    res = run_cli(("eval", *args, "--height", str(H), "--width", str(W), "--domains", "synthC", "--device", "cpu",
                   "--json", str(out)))
    assert res.exit_code == 0, res.stderr
    [row] = json.loads(out.read_text())
    return {"line": res.stdout.splitlines()[0], **row}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_a_file_torchreids_engine_wrote_ranks_as_torchreid_ranks(engine_files, arch, metric, synth_c, tiny_synth,
                                                                 tmp_path):
    path = engine_files[arch]
    assert isinstance(torch.load(path, weights_only=False)["rank1"], np.float32)  # what the engine wrote
    got = _eval_json(tmp_path, "--model", str(path), "--data", str(tiny_synth), "--metric", metric,
                     *(["--arch", arch] if metric == "cosine" else []))
    assert got["line"].startswith("loaded torchreid checkpoint") and f"torchreid 0.2.5 as torchreid's" in got["line"]
    assert ("read from the weights' names and shapes" in got["line"]) == (metric != "cosine")
    rank1, mean_ap = torchreid_own_numbers(path, arch, synth_c, metric)
    assert abs(got["mAP"] - mean_ap) < 1e-6 and abs(got["rank1"] - rank1) < 1e-6, (got, rank1, mean_ap)


@pytest.mark.parametrize("kind", ["osnet_x1_0", "fast-reid"])
def test_attack_takes_a_torchreid_engine_file_and_a_fastreid_checkpointer_file(kind, engine_files, tiny_synth,
                                                                                tmp_path):
    path = engine_files.get(kind) or fastreid_checkpointer_file(tmp_path / "model_final.pth")[0]
    res = run_cli(("attack", "--model", str(path), "--data", str(tiny_synth), "--domains", "synthC", "--height",
                   "32", "--width", "16", "--method", "fgsm", "--max-queries", "4", "--examples", "0", "--device",
                   "cpu"))
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith(f"loaded {'torchreid' if kind != 'fast-reid' else 'fast-reid'} checkpoint")
    assert "FGSM" in res.stdout.upper() and "↓" in res.stdout


def test_an_osnet_file_without_torchreid_or_of_no_torchreid_model_is_one_line(engine_files, tiny_synth,
                                                                               monkeypatch, tmp_path):
    path = str(engine_files["osnet_x1_0"])
    args = ("eval", "--model", path, "--data", str(tiny_synth), "--device", "cpu")
    torch.save({"state_dict": {"body.weight": torch.zeros(2, 2)}, "epoch": 1}, tmp_path / "model.pth.tar-1")
    assert_one_error_line(run_cli(("eval", "--model", str(tmp_path / "model.pth.tar-1"), "--data", str(tiny_synth))),
                          "match none of torchreid's models")
    from privreid.models.external import torchreid_files

    monkeypatch.setattr(torchreid_files, "torchreid_installed", lambda: False)
    assert_one_error_line(run_cli(args), "pip install 'privreid[torchreid]'")
    # the ResNets keep privreid's own mapping, with torchreid's numbers
    from privreid.models.external import load_any_model

    images = torch.rand(2, 3, H, W)
    builtin = load_any_model(engine_files["resnet50"], height=H, width=W)
    assert "torchreid ResNet -> resnet50 (last stride 2)" in builtin.report.line()
    monkeypatch.undo()
    built = load_any_model(engine_files["resnet50"], height=H, width=W)
    assert "built by torchreid" in built.report.line()
    with torch.no_grad():
        torch.testing.assert_close(builtin.features_of(images), built.features_of(images), atol=1e-5, rtol=1e-4)


def test_a_refused_global_is_named_and_every_other_stays_refused(tmp_path):
    from privreid.models.external import load_any_model
    from privreid.errors import CheckpointError

    state = {"conv1.weight": torch.zeros(1)}
    cases = {"numpy._core.multiarray._reconstruct": np.arange(3),  # an array: not metadata
             "numpy.random._pickle.__randomstate_ctor": np.random.RandomState(0)}
    for name, value in cases.items():
        torch.save({"state_dict": state, "epoch": 1, "extra": value}, tmp_path / "bad.pth")
        with pytest.raises(CheckpointError, match=f"the global {name}"):
            load_any_model(tmp_path / "bad.pth")
    res = run_cli(("eval", "--model", str(tmp_path / "bad.pth"), "--data", "synth", "--device", "cpu"))
    assert_one_error_line(res, "the global numpy.random")
    # a numpy scalar and dtype in the metadata are data, not code
    torch.save({"state_dict": state, "rank1": np.float64(0.5), "dtype": np.dtype("float32"), "n": np.int64(3)},
               tmp_path / "ok.pth")
    from privreid.models.external.files import read_torch_file

    assert read_torch_file(tmp_path / "ok.pth")["rank1"] == 0.5
    # the same file as numpy 1 writes it (torchreid's era): the scalar's constructor is numpy.core.multiarray's
    import zipfile

    with zipfile.ZipFile(tmp_path / "ok.pth") as zin, zipfile.ZipFile(tmp_path / "np1.pth", "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename.endswith("data.pkl"):
                assert b"cnumpy._core.multiarray\n" in data
                data = data.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
            zout.writestr(item, data)
    assert read_torch_file(tmp_path / "np1.pth")["rank1"] == 0.5


@pytest.mark.parametrize("layout", ["current", "early"])
def test_a_fastreid_checkpointer_file_ranks_as_fastreid_with_its_bicubic_resize(layout, synth_c, tiny_synth,
                                                                               tmp_path):
    from PIL import Image
    import torchvision.transforms as T

    path, features = fastreid_checkpointer_file(tmp_path / "model_final.pth", layout=layout)
    got = _eval_json(tmp_path, "--model", str(path), "--data", str(tiny_synth), "--metric", "cosine")
    line = got["line"]
    assert "test resize bicubic (fast-reid default)" in line and "source metric cosine (fast-reid's TEST.METRIC)" \
        in line
    resize = T.Compose([T.Resize((H, W), interpolation=3), T.ToTensor(),  # fast-reid's test transform
                        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    query, gallery = mode_split(synth_c)

    def feats(samples):
        with torch.no_grad():
            f = features(torch.stack([resize(Image.open(p).convert("RGB")) for p, _, _ in samples]))
        return torch.nn.functional.normalize(f, dim=1)

    distmat = (1 - feats(query) @ feats(gallery).T).numpy()
    rank1, mean_ap = _rank(distmat, synth_c)
    assert abs(got["mAP"] - mean_ap) < 1e-6 and abs(got["rank1"] - rank1) < 1e-6, (got, rank1, mean_ap)
    bilinear = _eval_json(tmp_path, "--model", str(path), "--data", str(tiny_synth), "--metric", "cosine",
                          "--interpolation", "bilinear")
    assert "test resize bilinear (argument)" in bilinear["line"]


def test_every_torchreid_model_is_told_apart_by_its_weights():
    """What :func:`infer_torchreid_name` relies on: no two of torchreid's models have the same weight names and
    shapes (classifier width aside), so a file's architecture is read from its weights unambiguously."""
    from privreid.model_names import TORCHREID_ARCHS
    from privreid.models.external.torchreid_models import _models, _signature

    models, seen = _models(), {}
    for name in TORCHREID_ARCHS:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            signature = _signature(models.build_model(name, 5, pretrained=False, use_gpu=False).state_dict())
        assert signature not in seen, (name, seen.get(signature))
        seen[signature] = name


def test_the_cli_and_the_api_agree_at_non_default_options(engine_files, tiny_synth, tmp_path):
    path = engine_files["osnet_x1_0"]
    cli = _eval_json(tmp_path, "--model", str(path), "--arch", "osnet_x1_0", "--data", str(tiny_synth),
                     "--metric", "cosine", "--flip", "--interpolation", "bicubic", "--ap", "devkit")
    api = privreid.evaluate(path, str(tiny_synth), arch="osnet_x1_0", height=H, width=W, domains="synthC",
                            metric="cosine", flip=True, interpolation="bicubic", ap="devkit")
    assert list(api.testsets) == ["synthC"]
    for key in ("rank1", "rank5", "mAP", "mINP"):
        assert api.testsets["synthC"][key] == cli[key], key
    default = privreid.evaluate(path, str(tiny_synth), arch="osnet_x1_0", height=H, width=W, domains="synthC")
    assert default.testsets["synthC"]["mAP"] != cli["mAP"]  # the options change the numbers
    assert api.model["settings"]["test resize"] == "bicubic (argument)"
    assert api.model["settings"]["input"] == f"{H}x{W} (argument)"


def _onnx_file(path, height: int, width: int):
    """A tiny ONNX graph with a fixed declared input (1, 3, height, width): global average pool, flatten."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
         helper.make_node("Flatten", ["pooled"], ["features"])], "tiny",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, height, width])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_an_onnx_input_size_that_differs_is_one_line_before_any_data_is_read(tiny_synth, tmp_path):
    pytest.importorskip("onnxruntime")
    path = _onnx_file(tmp_path / "model.onnx", 32, 16)
    res = run_cli(("eval", "--model", str(path), "--data", str(tmp_path / "no-such-data"), "--height", "64",
                   "--width", "32", "--device", "cpu"))
    assert_one_error_line(res, "takes 32x16 images (its declared input), but height / width given 64x32")
    res = run_cli(("compare", str(path), "--data", str(tmp_path / "no-such-data"), "--height", "128",
                   "--device", "cpu"))
    assert_one_error_line(res, "its declared input")
    ok = run_cli(("eval", "--model", str(path), "--data", str(tiny_synth), "--domains", "synthC", "--device", "cpu"))
    assert ok.exit_code == 0, ok.stderr
    assert "input 32x16 (file)" in ok.stdout and "an ONNX" not in ok.stdout
    from privreid.errors import PrivreidError

    with pytest.raises(PrivreidError, match="takes 32x16 images"):  # the Python API's size override
        privreid.evaluate(path, str(tiny_synth), height=64, width=32, domains="synthC")


def test_the_python_api_names_its_keywords_where_the_command_line_names_flags(tiny_synth):
    from privreid.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^seq_len must be at least 1") as exc:
        privreid.evaluate(torch.nn.Flatten(), str(tiny_synth), seq_len=0)
    assert "--" not in str(exc.value)
    res = run_cli(("eval", "--model", "no-such-file.pt", "--data", str(tiny_synth), "--seq-len", "0"))
    assert_one_error_line(res, "--seq-len must be at least 1")
