"""``--precision fp32|bf16|fp16`` (privreid.precision): bf16 on the CPU, the refusals, the CUDA-only paths."""

from __future__ import annotations

import json

import pytest
import torch

from privreid.errors import ConfigError
from privreid.precision import Autocast, at_precision, autocast, check_precision, grad_scaler, to_device
from privreid.training import train_run
from tests.conftest import tiny_config

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_fp32_is_the_default_and_changes_nothing():
    """fp32 adds no context, no scaling and no wrapper: the default runs exactly the code it ran before."""
    model = torch.nn.Linear(4, 2)
    assert at_precision(model, "fp32", "cpu") is model
    assert not grad_scaler("fp32", "cpu").is_enabled()
    with autocast("fp32", "cpu"):
        assert not torch.is_autocast_enabled("cpu")
    assert tiny_config("x").runtime.precision == "fp32"


def test_autocast_wrapper_runs_16_bit_products_and_returns_fp32():
    torch.manual_seed(0)
    model, x = torch.nn.Linear(64, 8), torch.randn(5, 64)
    wrapped = at_precision(model, "bf16", "cpu")
    assert isinstance(wrapped, Autocast)
    out = wrapped(x)
    assert out.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x).float()
    assert torch.equal(out, expected)
    assert not torch.equal(out, model(x))  # the product was rounded to bf16
    assert (out - model(x)).abs().max() < 0.05
    wrapped.eval()
    assert not model.training  # train()/eval() reach the wrapped model


@pytest.mark.parametrize("precision, dp_sgd, says", [
    ("fp8", False, "precision must be one of fp32, bf16, fp16"),
    ("fp16", True, "--dp-sgd with --precision fp16 is not supported"),
])
def test_check_precision_refuses(precision, dp_sgd, says):
    with pytest.raises(ConfigError, match=says.replace("-", r"\-")):
        tiny_config("x", precision=precision, dp_sgd=dp_sgd, noise_multiplier=1.0 if dp_sgd else None).validate()
    if not dp_sgd:
        with pytest.raises(ConfigError, match=says):
            check_precision(precision)


def test_dp_sgd_trains_in_bf16(tiny_synth, tmp_path):
    """Opacus' hooks grad-sample mode under bf16 autocast: per-sample gradients, clipping, noise, accounting."""
    summary = train_run(tiny_config(tiny_synth, rounds=1, precision="bf16", dp_sgd=True, noise_multiplier=1.0),
                        tmp_path / "dp", progress=False)
    assert summary["precision"] == "bf16"
    assert summary["privacy"]["epsilon"] > 0


def test_bf16_train_and_eval_on_cpu(tiny_synth, tmp_path):
    """A tiny bf16 run trains (finite loss), evaluates, and records its precision in config.yaml and summary.json;
    its metrics are close to, but not the same as, the fp32 run's."""
    runs = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / precision
        runs[precision] = train_run(tiny_config(tiny_synth, rounds=1, precision=precision), out, progress=False)
        assert runs[precision]["precision"] == precision
        assert f"precision: {precision}" in (out / "config.yaml").read_text()
    fp32, bf16 = runs["fp32"], runs["bf16"]
    train = [json.loads(line) for line in (tmp_path / "bf16" / "metrics.jsonl").read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in train if r.get("scope") == "train")
    assert 0 <= bf16["global_seen"]["mAP"] <= 1
    assert fp32["global_seen"] != bf16["global_seen"] or fp32["global_unseen"] != bf16["global_unseen"]
    assert any("--precision bf16" in d for d in bf16["deviations"])
    assert not any("precision" in d for d in fp32["deviations"])


@pytest.mark.slow
def test_fp16_scaler_on_cpu_trains(tiny_synth, tmp_path):
    """fp16 runs through the loss scaler (CPU autocast of torch >= 2.4 takes fp16) and trains finite weights."""
    summary = train_run(tiny_config(tiny_synth, rounds=1, precision="fp16"), tmp_path / "fp16", progress=False)
    assert summary["precision"] == "fp16"
    state = torch.load(tmp_path / "fp16" / "ckpt.pt", map_location="cpu", weights_only=False)
    tensors = [v for v in _tensors(state) if v.is_floating_point()]
    assert tensors and all(torch.isfinite(v).all() for v in tensors)


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


@cuda
def test_cuda_batch_is_channels_last_and_fp16_scaler_enabled():
    images = torch.randn(2, 3, 32, 16).pin_memory()
    on = to_device(images, "cuda")
    assert on.is_cuda and on.is_contiguous(memory_format=torch.channels_last)
    assert grad_scaler("fp16", "cuda").is_enabled()


def test_cpu_batch_keeps_its_layout():
    images = torch.randn(2, 3, 32, 16)
    assert to_device(images, "cpu").is_contiguous()


@pytest.fixture(scope="module")
def tiny_run(tiny_synth, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    train_run(tiny_config(tiny_synth, rounds=1), out, progress=False)
    return out / "ckpt.pt"


def _cli(*args):
    from typer.testing import CliRunner

    from privreid.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_eval_bf16_differs_from_fp32_and_refuses_an_unknown_precision(tiny_run, tmp_path):
    """``privreid eval --precision bf16`` on the CPU: features from bf16 products (so the metrics move), ranking
    in fp32."""
    results = {}
    for precision in ("fp32", "bf16"):
        res = _cli("eval", "--model", tiny_run, "--device", "cpu", "--precision", precision, "--json",
                   tmp_path / f"{precision}.json")
        assert res.exit_code == 0, res.output
        results[precision] = json.loads((tmp_path / f"{precision}.json").read_text())
    fp32, bf16 = (json.dumps(results[p], sort_keys=True) for p in ("fp32", "bf16"))
    assert fp32 != bf16
    assert "precision must be one of" in _cli("eval", "--model", tiny_run, "--precision", "half").output


def test_attack_bf16_runs_and_records_its_precision(tiny_run, tmp_path):
    res = _cli("attack", "--model", tiny_run, "--method", "fgsm", "--device", "cpu", "--precision", "bf16",
               "--max-queries", 4, "--examples", 0, "--out", tmp_path / "a")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "a" / "results.json").read_text())["settings"]["precision"] == "bf16"


def test_inversion_says_it_runs_in_fp32(tiny_run, tmp_path):
    from privreid.precision import INVERSION_NOTE

    res = _cli("invert", "--model", tiny_run, "--iterations", 2, "--device", "cpu", "--precision", "bf16",
               "--out", tmp_path / "inv")
    assert res.exit_code == 0, res.output
    assert f"note: --precision bf16 ignored: {INVERSION_NOTE}" in res.output
    assert "fp32" in (tmp_path / "inv" / "log.txt").read_text()
    quiet = _cli("invert", "--model", tiny_run, "--iterations", 2, "--device", "cpu", "--out", tmp_path / "inv32")
    assert quiet.exit_code == 0 and "note: --precision" not in quiet.output


def test_dp_sgd_bf16_still_refuses_a_proximal_term(tiny_synth, tmp_path):
    """The attribution check's bf16 tolerance (two bf16 rounding units) still catches FedProx's mu = 0.01."""
    config = tiny_config(tiny_synth, "fedprox", rounds=1, precision="bf16", dp_sgd=True, noise_multiplier=1.0,
                         method_options={"mu": 0.01})
    with pytest.raises(ConfigError, match="not a sum of per-sample gradients"):
        train_run(config, tmp_path / "dp", progress=False)
