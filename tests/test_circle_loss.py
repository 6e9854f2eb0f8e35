"""Circle loss (Sun et al. 2020, pairwise form) against a hand computation."""

import math

import pytest
import torch

from privreid.losses import circle_loss


def hand_circle(features, labels, margin, gamma):
    """Eq. 6 of Sun et al. written out with Python floats, one anchor at a time."""
    z = [[x / math.sqrt(sum(v * v for v in row)) for x in row] for row in features]
    n, losses = len(z), []
    for i in range(n):
        sims = [sum(a * b for a, b in zip(z[i], z[j])) for j in range(n)]
        sp = [sims[j] for j in range(n) if j != i and labels[j] == labels[i]]
        sn = [sims[j] for j in range(n) if labels[j] != labels[i]]
        if not sp or not sn:
            continue
        pos = sum(math.exp(-gamma * max(1 + margin - s, 0) * (s - (1 - margin))) for s in sp)
        neg = sum(math.exp(gamma * max(s + margin, 0) * (s - margin)) for s in sn)
        losses.append(math.log(1 + pos * neg))
    return sum(losses) / len(losses)


FEATURES = [[1.0, 0.2, 0.0], [0.8, 0.5, 0.1], [0.1, 1.0, 0.3], [-0.2, 0.9, 0.6], [0.5, 0.5, 0.5]]


@pytest.mark.parametrize("margin,gamma", [(0.45, 64.0), (0.25, 8.0), (0.0, 1.0)])
def test_matches_hand_computation(margin, gamma):
    labels = [0, 0, 1, 1, 2]  # anchor 4 has no positive: left out
    got = circle_loss(torch.tensor(FEATURES, dtype=torch.float64), torch.tensor(labels), margin, gamma)
    assert got.item() == pytest.approx(hand_circle(FEATURES, labels, margin, gamma), rel=1e-9)


def test_defaults_are_the_reference_codes_and_scale_is_irrelevant():
    f, labels = torch.tensor(FEATURES, dtype=torch.float64), torch.tensor([0, 0, 1, 1, 2])
    assert circle_loss(f, labels).item() == pytest.approx(hand_circle(FEATURES, [0, 0, 1, 1, 2], 0.45, 64.0))
    assert torch.allclose(circle_loss(3.0 * f, labels), circle_loss(f, labels))


def test_weights_are_constants_in_the_gradient():
    """a_p, a_n carry no gradient (Sun et al.): the gradient equals that of the loss with them frozen."""
    torch.manual_seed(0)
    f = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    margin, gamma = 0.45, 16.0
    (grad,) = torch.autograd.grad(circle_loss(f, labels, margin, gamma), f)

    g = f.detach().clone().requires_grad_(True)
    z = torch.nn.functional.normalize(g, dim=1)
    sim = z @ z.T
    a_p, a_n = (1 + margin - sim.detach()).clamp_min(0), (sim.detach() + margin).clamp_min(0)
    total = 0
    for i in range(6):
        pos = [j for j in range(6) if j != i and labels[j] == labels[i]]
        neg = [j for j in range(6) if labels[j] != labels[i]]
        lp = torch.stack([-gamma * a_p[i, j] * (sim[i, j] - (1 - margin)) for j in pos]).logsumexp(0)
        ln = torch.stack([gamma * a_n[i, j] * (sim[i, j] - margin) for j in neg]).logsumexp(0)
        total = total + torch.nn.functional.softplus(lp + ln)
    (expected,) = torch.autograd.grad(total / 6, g)
    assert torch.allclose(grad, expected, atol=1e-10)


def test_pulling_positives_together_lowers_the_loss():
    labels = torch.tensor([0, 0, 1, 1])
    apart = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [0.1, 1.0]])
    together = torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    assert circle_loss(together, labels) < circle_loss(apart, labels)


def test_no_valid_anchor_gives_zero_with_a_finite_gradient():
    f = torch.randn(3, 4, requires_grad=True)
    loss = circle_loss(f, torch.tensor([0, 1, 2]))  # no positives at all
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(f.grad, torch.zeros_like(f))
    g = torch.randn(3, 4, requires_grad=True)
    circle_loss(g, torch.tensor([0, 0, 1])).backward()  # anchor 2 has no positive: gradients stay finite
    assert torch.isfinite(g.grad).all()
