import pytest
import torch

from privreid.defenses.beta_noise import NoisyAggregate, add_white_noise, with_beta_noise
from privreid.federated.registry import get_method
from privreid.federated.strategy import DataVolumeAverage, Upload

from conftest import tiny_config


def test_white_noise_mean_and_variance():
    torch.manual_seed(0)
    state = {"w": torch.full((200_000,), 3.0), "n": torch.tensor(7)}
    noisy = add_white_noise(state, 0.05)
    diff = noisy["w"] - 3.0
    assert abs(diff.mean().item()) < 0.05 * 0.02
    assert diff.std().item() == pytest.approx(0.05, rel=0.02)
    assert noisy["n"].item() == 7 and state["w"].eq(3.0).all()  # ints untouched, input not mutated


def test_noisy_aggregate_is_inner_aggregate_plus_noise():
    ups = [Upload("a", {"w": torch.zeros(50_000)}, 1), Upload("b", {"w": torch.ones(50_000)}, 3)]
    torch.manual_seed(1)
    out = NoisyAggregate(DataVolumeAverage(), 0.1).aggregate({}, ups)
    torch.manual_seed(1)
    expected = torch.full((50_000,), 0.75) + 0.1 * torch.randn(50_000)
    assert torch.allclose(out["w"], expected)


@pytest.mark.parametrize("mode,upload,download", [("upload", True, False), ("download", False, True),
                                                  ("both", True, True)])
def test_modes_wrap_the_right_hooks(tiny_synth, mode, upload, download):
    cfg = tiny_config(tiny_synth)
    method = with_beta_noise(get_method("fedpav"), 0.5, mode)
    assert isinstance(method.make_strategy(cfg), NoisyAggregate) == upload
    assert (method.make_download is not None) == download
    if download:
        torch.manual_seed(0)
        received = method.make_download(cfg)({"w": torch.zeros(10_000)}, None, {}, 0)
        assert received["w"].std().item() == pytest.approx(0.5, rel=0.05)


def test_beta_run_records_no_formal_guarantee(tiny_synth, tmp_path):
    from privreid.data.catalog import build_federation
    from privreid.federated.engine import FederatedEngine

    cfg = tiny_config(tiny_synth, rounds=1, beta=0.01, beta_mode="both")
    summary = FederatedEngine(cfg, build_federation(cfg.data.roots, test_domains=["synthC"]), tmp_path,
                              progress=False).run()
    assert summary["privacy"]["epsilon"] is None and "no formal" in summary["privacy"]["guarantee"]
