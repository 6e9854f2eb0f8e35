"""Learning-rate schedules (issue 25): a named choice per run, and each paper preset follows its reference code."""

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from privreid.commands.sweep import base_config
from privreid.config import RunConfig
from conftest import with_fields
from privreid.data.types import ClientData
from privreid.deviations import deviations, prose_departures, recipe_deviations
from privreid.errors import ConfigError
from privreid.federated.client import ClientContext, SupervisedUpdate
from privreid.federated.lr_schedule import lr_factor, lr_table
from privreid.federated.methods.dppt import one_cycle_factor
from privreid.models import build_model
from privreid.composition import method_of

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def preset(name: str, *flags: str) -> RunConfig:
    return base_config(["--config", str(CONFIGS / name), *flags]).validate()


def with_train(**fields) -> RunConfig:
    return with_fields(RunConfig(), **fields).validate()


@pytest.mark.parametrize("schedule,expected", [
    # lr_step 3, gamma 0.5, rounds 0..7 (0-based)
    ("step", [1, 1, 1, .5, .5, .5, .25, .25]),
    ("once", [1, 1, 1, .5, .5, .5, .5, .5]),
    ("local-step", [1] * 8),  # one local epoch per round: never decays
    ("none", [1] * 8),
])
def test_round_factors_by_hand(schedule, expected):
    config = with_train(lr_schedule=schedule, lr_step=3, lr_gamma=0.5, rounds=8)
    assert [lr_factor(config, r) for r in range(8)] == expected


def test_local_step_decays_within_a_round_and_restarts():
    # the reference steps its StepLR at the start of each local epoch: epoch e runs after e + 1 steps
    config = with_train(lr_schedule="local-step", lr_step=2, lr_gamma=0.1, local_epochs=5)
    assert [lr_factor(config, 7, e) for e in range(5)] == pytest.approx([1, 0.1, 0.1, 0.01, 0.01])
    assert lr_factor(config, 8, 0) == 1.0  # a new round builds a new scheduler


def test_an_unknown_schedule_is_one_line():
    with pytest.raises(ConfigError, match="lr_schedule must be one of step, once, local-step, none"):
        with_train(lr_schedule="cosine")


def test_fedpav_preset_rate_never_decays_as_in_the_reference_code():
    # cap-ntu/FedReID client.py rebuilds StepLR(step_size=40) in every local train() and steps it per local
    # epoch: with E = 1 the rate is constant.  The old round-based decay left 1e-7 of it by round 280.
    table = lr_table(preset("fedpav-paper.yaml"), method_of(preset("fedpav-paper.yaml")))
    assert set(table) == {"backbone", "head", "neck"}
    assert table["backbone"] == [0.005] * 300
    assert table["head"] == [0.05] * 300 and table["neck"] == [0.05] * 300


def test_fedreid_preset_decays_once_at_round_20():
    # SunTongtongtong/FedReid lib/localUpdate.py: decay_factor = 1.0 if cur_epoch < 20 else 0.1 (the old preset
    # stepped every 20 rounds: 1e-4 of the rate by round 80)
    table = lr_table(preset("fedreid-paper.yaml"), method_of(preset("fedreid-paper.yaml")))
    assert table["backbone"][:20] == [0.01] * 20
    assert table["backbone"][20:] == pytest.approx([0.001] * 80)
    assert table["head"][99] == pytest.approx(0.01)


def test_dppt_reports_its_one_cycle_at_each_round_start():
    config = preset("dppt-sysu-paper.yaml")
    table = lr_table(config, method_of(config))
    assert table["head"] == pytest.approx([0.2 * one_cycle_factor(r, 50) for r in range(50)])
    off = preset("dppt-sysu-paper.yaml", "--opt", "onecycle=false")
    assert lr_table(off, method_of(off))["head"] == pytest.approx([0.2 * 0.1 ** (r // 40) for r in range(50)])


class Images(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.rand(3, 32, 16), i % 2, 0


def test_client_trains_local_epochs_at_the_local_step_rates():
    config = with_train(lr_schedule="local-step", lr_step=2, lr_gamma=0.5, local_epochs=3, batch_size=4,
                        lr_backbone=0.02, lr_head=0.2, triplet_weight=0.0)
    seen = []

    class Recording(SupervisedUpdate):
        def loader(self, ctx, epoch):
            return DataLoader(Images(), batch_size=4)

        def schedule_step(self, ctx, opt, epoch, step, n_batches):
            seen.append([g["lr"] for g in opt.param_groups])

    ctx = ClientContext(model=build_model("resnet18", num_classes=2, feat_dim=8), client=ClientData("c", "d", []),
                        round=5, config=config, device=torch.device("cpu"), global_state={}, seed=0)
    Recording(config)(ctx)
    assert [rate for rates in seen for rate in rates] == pytest.approx([0.02, 0.2, 0.01, 0.1, 0.01, 0.1])


def test_fedpav_preset_names_the_prose_it_departs_from():
    config = preset("fedpav-paper.yaml")
    assert recipe_deviations(config, method_of(config)) == []
    [text] = [d for d in prose_departures(config, method_of(config)) if d.startswith("--lr-schedule")]
    assert "reference code cap-ntu/FedReID client.py" in text and "paper 004 Sec. 3.5" in text
    assert text in deviations(config, method_of(config))
    # the prose's schedule is a deviation from the code that produced the published numbers, and says so
    step = preset("fedpav-paper.yaml", "--lr-schedule", "step")
    [dev] = [d for d in recipe_deviations(step, method_of(step)) if d.startswith("--lr-schedule")]
    assert dev.startswith("--lr-schedule step (FedPav: local-step;") and "the paper's prose" in dev
    assert not any(d.startswith("--lr-schedule") for d in prose_departures(step, method_of(step)))


@pytest.mark.parametrize("name,metric", [("fedpav-paper.yaml", "cosine"), ("fedreid-paper.yaml", "euclidean"),
                                         ("ska-paper.yaml", "euclidean"), ("dppt-sysu-paper.yaml", "cosine")])
def test_paper_presets_rank_with_their_reference_codes_metric(name, metric):
    config = preset(name)
    assert config.evaluation.metric == metric
    other = {"cosine": "euclidean", "euclidean": "cosine"}[metric]
    assert any(d.startswith(f"--eval-metric {other}") for d in recipe_deviations(preset(name, "--eval-metric", other), method_of(preset(name, "--eval-metric", other))))
