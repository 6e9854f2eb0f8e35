"""Attack objects in registries (issue 12.6) and the two attack speed-ups of issue 14, each bit-identical.

* the retrieval attacks reuse the clean evaluation's features instead of their own clean forward pass;
* gradient inversion computes the observed gradient's norm once per reconstruction;
* inversion attacks and threat models are registered objects: a new one is a class and one registration.
"""

import pytest
import torch

from privreid.retrieval_attacks.feature_attacks import RETRIEVAL_ATTACKS
from privreid.retrieval_attacks.feature_attacks import build_attack
from privreid.inversion import (INVERSION_ATTACKS, THREATS, InversionSettings, ThreatModel, reconstruct,
                                        register_inversion_attack, register_threat)
from privreid.inversion import optimise
from privreid.inversion.optimise import IDLG
from privreid.inversion.threat_models import FullGradient
from privreid.retrieval_attacks.retrieval import attack_label, evaluate_under_attack
from privreid.data.types import TestSet as QueryGallery
from privreid.errors import ConfigError
from privreid.models import build_model


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model("resnet18", num_classes=5, feat_dim=16).eval()


class CountingModel(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, x):
        self.calls += 1
        return self.inner(x)


# --------------------------------------------------------------------------- retrieval attacks


@pytest.mark.parametrize("method", list(RETRIEVAL_ATTACKS))
def test_reusing_clean_features_is_bit_identical(model, method):
    x = torch.rand(3, 3, 32, 16, generator=torch.Generator().manual_seed(1))
    attack = build_attack(method, model, steps=2)
    with torch.no_grad():
        clean = model(attack.normalize(x))
    torch.manual_seed(3)
    own = attack.perturb(x)
    torch.manual_seed(3)
    reused = attack.perturb(x, clean)
    assert torch.equal(own, reused)


def test_fgsm_runs_one_forward_pass_with_the_clean_features(model):
    counting = CountingModel(model).eval()
    attack = build_attack("fgsm", counting)
    x = torch.rand(2, 3, 32, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        clean = model(attack.normalize(x))
    attack.perturb(x)
    assert counting.calls == 2  # its own clean pass, then the gradient pass
    counting.calls = 0
    attack.perturb(x, clean)
    assert counting.calls == 1


def test_evaluate_under_attack_reuses_the_clean_evaluation_bit_for_bit(model, tiny_synth, monkeypatch):
    """The evaluation with reuse equals the one where each attack recomputes its clean features."""
    from privreid.data.catalog import resolve_datasets
    from privreid.retrieval_attacks.feature_attacks import FeatureAttack

    domain = resolve_datasets([str(tiny_synth)])["synthA"]
    testset = QueryGallery("A", [s for s in domain.train if s[2] == 0][:6], [s for s in domain.train if s[2] != 0][:12])
    kw = dict(height=32, width=16, eps=8 / 255, steps=2, target="both", batch_size=4, seed=5)
    reused = {m: evaluate_under_attack(model, testset, method=m, **kw) for m in ("fgsm", "tifgsm")}
    original = FeatureAttack.perturb
    monkeypatch.setattr(FeatureAttack, "perturb", lambda self, images, clean=None: original(self, images))
    own = {m: evaluate_under_attack(model, testset, method=m, **kw) for m in ("fgsm", "tifgsm")}
    for m in reused:
        a, b = reused[m].record(), own[m].record()
        a.pop("attack_seconds"), b.pop("attack_seconds")
        assert a == b


def test_retrieval_attack_labels_come_from_the_registry_when_asked():
    assert all(attack_label(name) == cls.label for name, cls in RETRIEVAL_ATTACKS.items())
    assert attack_label("not-an-attack") == "not-an-attack"


# --------------------------------------------------------------------------- inversion


def _subject():
    return torch.rand(3, 32, 16, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("threat", ["full", "shared"])
def test_cached_observed_norm_gives_bit_identical_reconstructions(model, threat, monkeypatch):
    shared = {n for n, _ in model.named_parameters() if not n.startswith("classifier.")}
    settings = InversionSettings(attack="ig", iterations=4)
    calls = []
    norm = optimise.observed_norm_of
    monkeypatch.setattr(optimise, "observed_norm_of", lambda o: calls.append(1) or norm(o))
    cached = reconstruct(model, _subject(), 2, threat=threat, shared=shared, settings=settings, seed=4)
    assert len(calls) == 1  # once per reconstruction, not once per iteration
    monkeypatch.setattr(optimise.GradientMatch, "__call__",
                        lambda self, dummy: optimise.gradient_distance(dummy, self.observed, self.match))
    calls.clear()
    fresh = reconstruct(model, _subject(), 2, threat=threat, shared=shared, settings=settings, seed=4)
    assert len(calls) == 1 + 4 + 1  # the uncached path: one more per iteration, and the last iterate's (best-of)
    assert torch.equal(cached.reconstruction, fresh.reconstruction)
    assert cached.inferred_label == fresh.inferred_label


def test_inversion_registries_hold_the_built_in_objects():
    assert {"dlg", "idlg", "ig"} <= set(INVERSION_ATTACKS)
    assert {"full", "shared", "shared-feature", "aggregate"} <= set(THREATS)
    assert (INVERSION_ATTACKS["ig"].distance, INVERSION_ATTACKS["ig"].tv) == ("cosine", 0.2)
    assert InversionSettings(attack="dlg").distance == "l2" and InversionSettings(attack="ig").tv_weight == 0.2
    choices = ", ".join(INVERSION_ATTACKS)
    with pytest.raises(ConfigError, match=f"unknown inversion attack 'xx'; choose one of: {choices}$"):
        InversionSettings(attack="xx")
    with pytest.raises(ConfigError, match="already registered"):
        register_inversion_attack(IDLG())
    with pytest.raises(ConfigError, match="already registered"):
        register_threat(FullGradient())


def test_a_new_attack_and_a_new_threat_are_one_registration_each(model):
    class CosineIDLG(IDLG):
        name, summary, distance = "idlg-cos", "iDLG with cosine matching", "cosine"

    class HeadOnly(ThreatModel):
        """The server sees the classifier only (a toy threat)."""

        name, summary, needs_shared = "head-only", "classifier gradient only", False

        def visible(self, grads, shared):
            return {n: g for n, g in grads.items() if n.startswith("classifier.")}

        def reconstruct(self, model, observation, start, *, settings, **kw):
            self.seen = sorted(observation.grads)
            return start, None, None

    with INVERSION_ATTACKS.restoring(), THREATS.restoring():
        register_inversion_attack(CosineIDLG())
        threat = register_threat(HeadOnly())
        _reconstruct_with_new_entries(model, threat)


def _reconstruct_with_new_entries(model, threat):
    settings = InversionSettings(attack="idlg-cos", iterations=2)
    assert settings.distance == "cosine"
    shared = {n for n, _ in model.named_parameters() if not n.startswith("classifier.")}
    rec = reconstruct(model, _subject(), 1, threat="full", shared=shared, settings=settings, seed=0)
    assert rec.label_rule is not None and rec.reconstruction.shape == (3, 32, 16)
    toy = reconstruct(model, _subject(), 1, threat="head-only", shared=shared, settings=settings, seed=0)
    assert threat.seen and all(n.startswith("classifier.") for n in threat.seen)
    assert torch.equal(toy.reconstruction, toy.baseline)


def test_the_help_texts_builtin_retrieval_attacks_are_the_registrys():
    """privreid.retrieval_attacks names the built-in retrieval attacks without torch (for --help); they are the registry's."""
    from privreid.retrieval_attacks import BUILTIN_RETRIEVAL_ATTACKS, retrieval_attack_names
    builtins = [n for n in RETRIEVAL_ATTACKS.names() if RETRIEVAL_ATTACKS.origin(n) == "built-in"]
    assert builtins == list(BUILTIN_RETRIEVAL_ATTACKS)
    assert retrieval_attack_names() == RETRIEVAL_ATTACKS.names()
