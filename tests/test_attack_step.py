"""The iterative attacks' default step scales with the budget and the steps (2.5 eps / steps: torchattacks' 2/255 for
8/255 and 10 steps), so PGD is at least as strong as FGSM at the same eps; a step that cannot reach eps is warned
about in one line (issue 28, section 5)."""

import warnings

import pytest

from privreid.retrieval_attacks.feature_attacks import build_attack, default_alpha

from test_retrieval_attacks import random_model, run, trained  # noqa: F401 (fixtures)


def test_the_default_step_scales_with_the_budget_and_the_steps(random_model):  # noqa: F811
    assert default_alpha(8 / 255, 10) == pytest.approx(2 / 255)  # torchattacks' PGD defaults
    assert default_alpha(8 / 255, 5) == pytest.approx(4 / 255)
    for eps in (4 / 255, 8 / 255, 16 / 255):
        assert build_attack("pgd", random_model, eps=eps).alpha == pytest.approx(eps / 4)
        assert build_attack("bim", random_model, eps=eps, steps=5).alpha == pytest.approx(eps / 2)
        assert build_attack("fgsm", random_model, eps=eps).alpha == pytest.approx(eps)


def test_a_step_that_cannot_reach_eps_is_one_warning_line(random_model):  # noqa: F811
    with pytest.warns(UserWarning) as caught:
        build_attack("pgd", random_model, eps=8 / 255, alpha=1 / 255, steps=5)
    (warning,) = caught
    message = str(warning.message)
    assert "\n" not in message and message.startswith("pgd: 5 steps of 1/255 cannot reach eps = 8/255"), message
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these warns: the steps reach eps, or FGSM takes one step of eps
        build_attack("pgd", random_model, eps=8 / 255, steps=5)
        build_attack("bim", random_model, eps=8 / 255, alpha=1 / 255, steps=8)
        build_attack("fgsm", random_model, eps=8 / 255, alpha=1 / 255, steps=1)


def test_pgd_with_default_step_drops_r1_at_least_as_much_as_fgsm(trained):  # noqa: F811
    model, testset = trained
    fgsm = run(model, testset, method="fgsm", seed=0)
    for steps in (5, 10):  # 5: the demo's `compare --suite` setting
        pgd = run(model, testset, method="pgd", steps=steps, seed=0)
        assert pgd.drop["rank1"] >= fgsm.drop["rank1"] and pgd.drop["mAP"] >= fgsm.drop["mAP"], \
            (steps, pgd.drop, fgsm.drop)
