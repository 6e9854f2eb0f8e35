"""privreid's RDP accounting (Opacus) against Google's dp-accounting, noise planning, per-client history."""

import logging

import dp_accounting
import pytest
import torch

from privreid.defenses.accounting import (
    EPSILON_TOLERANCE,
    ORDERS,
    ClientAccountant,
    epsilon,
    epsilon_floor,
    epsilon_of,
    noise_for_epsilon,
)
from privreid.errors import ConfigError

# (q, z, T, delta): no subsampling, DP-SGD-like small q over many steps, client-level rates over rounds
SETTINGS = [
    (1.0, 5.0, 10, 1e-5),
    (1.0, 10.0, 100, 1e-5),
    (0.01, 1.1, 1000, 1e-5),
    (0.02, 3.0, 200, 1e-5),
    (0.004, 1.0, 10000, 1e-6),
    (0.25, 3.0, 100, 1e-5),
    (0.5, 5.0, 50, 1e-7),
    (0.2, 1.5, 30, 1e-6),
]


def dp_accounting_epsilon(q, z, steps, delta):
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    return dp_accounting.rdp.RdpAccountant().compose(event, steps).get_epsilon(delta)


@pytest.mark.parametrize("q,z,steps,delta", SETTINGS)
def test_epsilon_matches_dp_accounting_rdp(q, z, steps, delta):
    logging.disable(logging.WARNING)  # dp-accounting logs orders it skips
    try:
        reference = dp_accounting_epsilon(q, z, steps, delta)
    finally:
        logging.disable(logging.NOTSET)
    assert 0.05 < reference < 20  # a meaningful regime, not a clamp at 0 or a blow-up
    assert epsilon(q, z, steps, delta) == pytest.approx(reference, abs=1e-3)


@pytest.mark.filterwarnings("ignore:Optimal order is the largest alpha")
def test_orders_extend_opacus_default_with_dp_accounting_grid():
    from opacus.accountants import RDPAccountant

    assert set(RDPAccountant.DEFAULT_ALPHAS) < set(ORDERS) and {11, 1024} <= set(ORDERS)
    # high noise: the large orders give a tighter (smaller) bound than Opacus' default grid
    opacus_default = RDPAccountant()
    opacus_default.history = [(20.0, 0.01, 100)]
    assert epsilon(0.01, 20.0, 100, 1e-5) < opacus_default.get_epsilon(1e-5) - 0.01


def test_composition_is_additive_over_history_rows():
    # three steps then two with the same mechanism == five steps; a different row composes too
    assert epsilon_of([(1.0, 0.1, 3), (1.0, 0.1, 2)], 1e-5) == pytest.approx(epsilon(0.1, 1.0, 5, 1e-5), rel=1e-9)
    mixed = epsilon_of([(1.0, 0.1, 5), (2.0, 0.05, 7)], 1e-5)
    assert epsilon(0.1, 1.0, 5, 1e-5) < mixed < epsilon(0.1, 1.0, 12, 1e-5)
    assert epsilon_of([], 1e-5) == 0.0


@pytest.mark.parametrize("target,q,steps", [(1.0, 0.01, 1000), (4.0, 0.25, 20), (8.0, 1.0, 5)])
def test_noise_for_epsilon_meets_the_target_within_tolerance(target, q, steps):
    z = noise_for_epsilon(target, q, steps, 1e-5)
    spent = epsilon(q, z, steps, 1e-5)
    assert target - EPSILON_TOLERANCE < spent <= target
    assert epsilon(q, z * 0.98, steps, 1e-5) > spent  # less noise would spend more


def test_unreachable_target_epsilon_is_a_config_error():
    floor = epsilon_floor(1e-5)
    # at huge noise the accountant's epsilon approaches the floor from above
    assert floor < epsilon(1.0, 1e4, 1, 1e-5) < floor + 1e-3
    with pytest.raises(ConfigError, match="unreachable"):
        noise_for_epsilon(floor * 0.99, 0.5, 100, 1e-5)
    with pytest.raises(ConfigError, match="steps"):
        noise_for_epsilon(1.0, 0.5, 0, 1e-5)


def test_client_accountant_merges_steps_and_round_trips_through_memory():
    acc = ClientAccountant()
    for _ in range(4):
        acc.step(1.0, 0.25)
    acc.step(2.0, 0.25, steps=3)
    assert acc.history == [(1.0, 0.25, 4), (2.0, 0.25, 3)] and acc.steps == 7
    memory: dict = {}
    acc.save(memory, "h")
    assert memory["h"].dtype == torch.float64 and memory["h"].shape == (2, 3)
    restored = ClientAccountant.from_memory(memory, "h")
    assert restored.history == acc.history
    assert restored.epsilon(1e-5) == acc.epsilon(1e-5) == epsilon_of(acc.history, 1e-5)
    assert restored.epsilon_after(2.0, 0.25, 5, 1e-5) == pytest.approx(
        epsilon_of([(1.0, 0.25, 4), (2.0, 0.25, 8)], 1e-5), rel=1e-12)
    assert ClientAccountant.from_memory({}, "h").epsilon(1e-5) == 0.0
