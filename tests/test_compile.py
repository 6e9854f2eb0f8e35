"""``--compile`` (issue 42): torch.compile of the model's forward and loss, checkpoints unchanged, refusals.

torch.compile on the CPU generates C++ kernels and builds them with the system compiler; the first compile of a
graph takes tens of seconds on a shared CPU, later ones of the same graph hit inductor's cache.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from privreid.config import RunConfig
from privreid.errors import ConfigError
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.models import build_model
from privreid.models.compilation import CompileClock, check_compile, compile_module

from badinput import run_cli
from conftest import TINY_TRAIN, tiny_config

#: the largest difference between compiled and eager features (fused kernels reassociate sums)
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.rand(6, 3, 32, 16, generator=torch.Generator().manual_seed(0))


def _features(model: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(images)


def test_compiled_features_match_eager(images):
    """Not marked slow: one forward graph, about 20 s cold on the loaded 2-core machine, 3 s from inductor's cache."""
    torch.manual_seed(0)
    eager = build_model("resnet18", num_classes=0, feat_dim=16).eval()
    compiled = compile_module(copy.deepcopy(eager))
    with CompileClock() as clock:
        got = _features(compiled, images)
    assert clock.seconds > 0  # it did compile
    want = _features(eager, images)
    assert got.shape == want.shape == (6, 16)
    assert (got - want).abs().max() <= TOLERANCE
    # compiled in place: the same module, the same keys; a deep copy of it is an eager module
    assert list(compiled.state_dict()) == list(eager.state_dict())
    assert copy.deepcopy(compiled)._compiled_call_impl is None
    with CompileClock() as again:
        torch.testing.assert_close(_features(compiled, images), got, rtol=0, atol=0)
    assert again.seconds == 0  # the graph is reused


@pytest.mark.slow
def test_compiled_training_state_loads_in_an_eager_model(tiny_synth, images, tmp_path):
    from privreid.data.catalog import federation_for_config

    config = tiny_config(tiny_synth, batch_size=4, max_steps_per_epoch=2, triplet_weight=0.0, compile=True)
    client = federation_for_config(config).clients[0]
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=client.num_classes, feat_dim=16)
    eager_keys = list(build_model("resnet18", num_classes=client.num_classes, feat_dim=16).state_dict())
    ctx = ClientContext(model=model, client=client, round=0, config=config, device=torch.device("cpu"),
                        global_state={}, seed=0)
    metrics = SupervisedUpdate(config)(ctx)
    assert metrics["steps"] == 2 and torch.isfinite(torch.tensor(metrics["loss"]))
    assert model.backbone._compiled_call_impl is not None and model.neck._compiled_call_impl is not None
    assert model.classifier._compiled_call_impl is None  # replaced per client: eager
    torch.save(model.state_dict(), tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    assert list(state) == eager_keys  # no _orig_mod. prefix
    fresh = build_model("resnet18", num_classes=client.num_classes, feat_dim=16)
    fresh.load_state_dict(state, strict=True)
    # the eager model holds the trained weights: the features of an eager copy of the run's model, bit for bit
    torch.testing.assert_close(_features(fresh, images), _features(copy.deepcopy(model), images), rtol=0, atol=0)
    assert (_features(model, images) - _features(fresh, images)).abs().max() <= TOLERANCE


@pytest.mark.slow
def test_compiled_run_and_eval(tiny_synth, tmp_path):
    """``privreid train --compile`` reports its compile time and writes an eager checkpoint; ``privreid eval
    --compile`` on it ranks as the eager evaluation does."""
    out = tmp_path / "run"
    train = run_cli(("train", "--data", str(tiny_synth), "--test-domains", "synthC", "--rounds", "1", *TINY_TRAIN,
                     "--compile", "--out", str(out)))
    assert train.exit_code == 0, train.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["compile_seconds"] > 0
    assert f"torch.compile (--compile): {summary['compile_seconds']:.1f} s compiling" in (out / "log.txt").read_text()
    ckpt = torch.load(out / "ckpt.pt", weights_only=False)
    assert not [k for k in ckpt["global_state"] if "_orig_mod" in k]
    rows = {}
    for flags in ((), ("--compile",)):
        evaluated = run_cli(("eval", "--model", str(out / "ckpt.pt"), "--device", "cpu", "--json",
                             str(tmp_path / f"eval{len(flags)}.json"), *flags))
        assert evaluated.exit_code == 0, evaluated.stderr
        assert ("torch.compile (--compile):" in evaluated.stdout) == bool(flags)
        rows[flags] = json.loads((tmp_path / f"eval{len(flags)}.json").read_text())
    eager, compiled = rows[()], rows[("--compile",)]
    assert [r["testset"] for r in eager] == [r["testset"] for r in compiled]
    for e, c in zip(eager, compiled):
        assert c["mAP"] == pytest.approx(e["mAP"], abs=1e-3) and c["rank1"] == pytest.approx(e["rank1"], abs=1e-3)


def test_dp_sgd_refuses_compile(tiny_synth, tmp_path):
    config = tiny_config(tiny_synth, dp_sgd=True, noise_multiplier=1.0, compile=True)
    with pytest.raises(ConfigError, match="Opacus's per-sample gradient hooks") as err:
        config.validate()
    assert "\n" not in str(err.value)
    out = tmp_path / "run"
    refused = run_cli(("train", "--data", str(tiny_synth), "--test-domains", "synthC", *TINY_TRAIN, "--dp-sgd",
                       "--noise-multiplier", "1", "--compile", "--out", str(out)))
    assert refused.exit_code != 0 and "--dp-sgd with --compile is not supported" in refused.stderr
    assert not out.exists()


def test_parallel_clients_refuse_compile(tiny_synth, tmp_path):
    from privreid.training import train_run

    with pytest.raises(ConfigError, match="--compile with parallel_clients is not supported"):
        train_run(tiny_config(tiny_synth, compile=True), tmp_path / "run", parallel_clients=2, progress=False)
    assert not (tmp_path / "run").exists()


def test_compile_needs_a_cxx_compiler_on_the_cpu(monkeypatch):
    import shutil

    check_compile("cpu")  # this machine has one (the slow tests compile)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="needs a C\\+\\+ compiler"):
        check_compile("cpu")


def test_compile_refuses_torchscript_and_parameterless_models():
    from privreid.models.compilation import compile_if

    scripted = torch.jit.script(torch.nn.Linear(2, 2))
    with pytest.raises(ConfigError, match="TorchScript"):
        compile_if(scripted, True, "cpu")
    with pytest.raises(ConfigError, match="has none"):
        compile_if(torch.nn.ReLU(), True, "cpu")
    relu = torch.nn.ReLU()
    assert compile_if(relu, False, "cpu") is relu and relu._compiled_call_impl is None


def test_compile_is_off_by_default_and_listed_in_help():
    assert RunConfig().runtime.compile is False
    for command, words in (("train", "identity loss"), ("eval", "forward"), ("attack", "forward")):
        shown = run_cli((command, "--help"), env={"COLUMNS": "200"})
        assert shown.exit_code == 0 and "--compile" in shown.stdout and words in shown.stdout, command


@pytest.mark.slow
def test_attack_compile_reports_its_compile_time_and_ranks_as_eager(tiny_synth, tmp_path):
    """``privreid attack --compile``: the same FGSM numbers as eager (to 1e-3), and its compile line."""
    out = tmp_path / "run"
    assert run_cli(("train", "--data", str(tiny_synth), "--test-domains", "synthC", "--rounds", "1", *TINY_TRAIN,
                    "--out", str(out))).exit_code == 0
    numbers = {}
    for flags in ((), ("--compile",)):
        attacked = run_cli(("attack", "--model", str(out / "ckpt.pt"), "--method", "fgsm", "--eps", "8/255",
                            "--max-queries", "8", "--examples", "0", "--device", "cpu", "--out",
                            str(tmp_path / f"attack{len(flags)}"), *flags))
        assert attacked.exit_code == 0, attacked.stderr
        assert ("torch.compile (--compile):" in attacked.stdout) == bool(flags)
        results = json.loads((tmp_path / f"attack{len(flags)}" / "results.json").read_text())
        numbers[flags] = dict(_float_leaves(results))
    eager, compiled = numbers[()], numbers[("--compile",)]
    assert eager and list(eager) == list(compiled)
    for path, value in eager.items():
        assert compiled[path] == pytest.approx(value, abs=1e-3), path


def _float_leaves(value, path=""):
    """The float leaves of a JSON document other than timings, as ``(path, value)``."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _float_leaves(v, f"{path}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _float_leaves(v, f"{path}/{i}")
    elif isinstance(value, float) and "seconds" not in path:  # timings differ, by design
        yield path, value


def test_each_instruction_set_setting_gets_its_own_kernel_cache(monkeypatch):
    """Inductor's cache is not keyed by ATEN_CPU_CAPABILITY and friends: kernels cached under AVX-512 and reused
    under AVX2 gave NaN features. Each setting gets its own directory; a directory the user chose is kept."""
    import os

    from privreid.models.compilation import _kernel_cache_per_isa

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    for key in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR"):
        monkeypatch.delenv(key, raising=False)
    _kernel_cache_per_isa()
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # the default setting keeps torch's default cache
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    _kernel_cache_per_isa()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"].endswith("isa-ATEN_CPU_CAPABILITY=avx2-MKL_CBWR=AVX2")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/mine")
    _kernel_cache_per_isa()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/mine"
