"""Min-Sum (Shejwalkar & Houmansadr, NDSS 2021, the AGR-agnostic attack): as :mod:`.min_max` (same options and
search), but the constraint is on sums: ``argmax_gamma sum_i ||m - b_i||^2 <= max_i sum_j ||b_i - b_j||^2`` (the
paper's Min-Sum objective; the authors' code compares with the smallest benign sum instead, a tighter bound).
"""

from __future__ import annotations

from privreid.malicious_clients import register_malicious_client
from privreid.malicious_clients.min_max import MinMax


class MinSum(MinMax):
    name = "min-sum"
    summary = "Min-Sum (Shejwalkar & Houmansadr 2021): mean + gamma * perturbation whose summed squared distance to " \
              "the benign updates stays within the largest benign one's"

    def bound(self, benign):
        return benign.sum(1).max()

    def score(self, distances):
        return distances.sum()


register_malicious_client(MinSum())
