"""Empirical DP audit in one training run (Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023).

``m`` canaries, each included with probability 1/2 (Algorithm 1). The auditor scores them, guesses "included"
for the ``k`` highest and "excluded" for the ``k`` lowest, and counts its correct guesses ``v`` of ``r = 2k``.
Under (epsilon, delta)-DP, ``P[v correct] <= P[Binomial(r, e^eps / (1 + e^eps)) >= v] + 2 m delta alpha``
(Theorem 5.2; ``alpha`` per its Appendix, :func:`p_value`), so the largest epsilon whose p-value stays below
``1 - confidence`` lower-bounds the epsilon that ran (:func:`epsilon_lower_bound`). A small grid of guess counts
(:data:`GUESS_FRACTIONS`) is paid for with a Bonferroni correction. A bound above the accounted epsilon means a
bug: **FAILED**. Below it, "PASSED" shows only that nothing was caught: one run with ``m`` canaries certifies
at most about ``log(m)``-sized epsilons.

* **record level (DP-SGD)**: canaries are images of a domain no client trains on (the unseen test domain, else
  the seen galleries) with random labels of the audited client's identities, added to its data; score: that
  client's model's log-likelihood of the random label.
* **client level (client DP)**: canaries are clients whose update is a fixed random direction ``u_i`` of norm
  ``canary_norm`` (far beyond the bound ``S``, which a correct implementation clips to); score:
  ``<theta_T - theta_0, u_i>`` on the released global model (Andrew et al.'s random-direction canaries).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privreid.checkpoint import Checkpoint
from privreid.config import RunConfig, dp_delta
from privreid.data.types import ClientData, Federation
from privreid.defenses.client_dp.mechanism import trainable_parameter_names
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine
from privreid.rundir import prepare_out_dir
from privreid.composition import build_run
from privreid.auditing.statistics import probe_outputs

#: guess counts tried, as fractions of the canaries (k = fraction * m / 2 guesses on each side)
GUESS_FRACTIONS = (0.1, 0.2, 0.5, 1.0)
CANARY_PREFIX = "canary"


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """P[at least ``v`` of ``r`` guesses correct] under (eps, delta)-DP with ``m`` canaries (Steinke et al. Thm 5.2)."""
    from scipy.stats import binom

    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m (got v={v}, r={r}, m={m})")
    q = 1.0 / (1.0 + math.exp(-eps))
    tail = float(binom.sf(v - 1, r, q))
    alpha, mass = 0.0, 0.0
    for i in range(1, v + 1):
        mass += float(binom.pmf(v - i, r, q))
        alpha = max(alpha, mass / i)
    return min(1.0, tail + 2 * m * delta * alpha)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, confidence: float) -> float:
    """The largest eps with ``p_value(eps) < 1 - confidence`` (bisection; 0 when even eps = 0 is not rejected)."""
    beta = 1.0 - confidence
    if p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2 * hi
        if hi > 1e3:
            return float("inf")
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_value(m, r, v, mid, delta) < beta else (lo, mid)
    return lo


def audit_scores(scores: np.ndarray, included: np.ndarray, *, delta: float, confidence: float) -> dict[str, Any]:
    """The best Bonferroni-corrected lower bound over :data:`GUESS_FRACTIONS`, with its guesses."""
    scores, included = np.asarray(scores, dtype=np.float64), np.asarray(included, dtype=bool)
    m = len(scores)
    order = np.argsort(-scores, kind="mergesort")
    ks = sorted({max(1, int(round(f * m / 2))) for f in GUESS_FRACTIONS})
    per_test = 1.0 - (1.0 - confidence) / len(ks)
    best = {"epsilon_lower": 0.0, "guesses": 0, "correct": 0}
    for k in ks:
        v = int(included[order[:k]].sum() + (~included[order[m - k:]]).sum())
        eps = epsilon_lower_bound(m, 2 * k, v, delta, per_test)
        if eps > best["epsilon_lower"] or best["guesses"] == 0:
            best = {"epsilon_lower": eps, "guesses": 2 * k, "correct": v}
    return {**best, "canaries": m, "included": int(included.sum()), "confidence": confidence,
            "guess_grid": [2 * k for k in ks]}


# --------------------------------------------------------------------------- canaries


def canary_direction(state_keys: list[str], shapes: dict[str, torch.Size], index: int, seed: int
                     ) -> dict[str, torch.Tensor]:
    """Canary ``index``'s unit direction over ``state_keys`` (seeded; regenerated identically when scoring)."""
    gen = torch.Generator().manual_seed(int(seed) * 100_003 + index)
    parts = {k: torch.randn(shapes[k], generator=gen, dtype=torch.float64) for k in state_keys}
    norm = math.sqrt(sum(float((p ** 2).sum()) for p in parts.values()))
    return {k: p / norm for k, p in parts.items()}


def _accounted(summary: dict[str, Any], client: str | None) -> float:
    privacy = summary.get("privacy", {})
    if client is not None and privacy.get("epsilon_per_client"):
        return float(privacy["epsilon_per_client"].get(client, privacy["epsilon"]))
    return float(privacy["epsilon"])


@dataclass
class DPAuditSettings:
    canaries: int = 40
    confidence: float = 0.95
    #: client level: the norm of a canary client's update, in units of the clipping bound S
    canary_norm: float = 1000.0
    seed: int = 0

    def validate(self) -> "DPAuditSettings":
        if self.canaries < 2:
            raise ConfigError(f"--canaries must be >= 2 (got {self.canaries})")
        if not 0.5 <= self.confidence < 1:
            raise ConfigError(f"--confidence must lie in [0.5, 1) (got {self.confidence})")
        if self.canary_norm <= 0:
            raise ConfigError("--canary-norm must be > 0")
        return self


def _inclusion(m: int, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, m, 0xCA7]).random(m) < 0.5


def _record_level(config: RunConfig, federation: Federation, settings: DPAuditSettings, run: Path, progress: bool
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, Any], str]:
    target = federation.clients[0]
    pool = [s for ts in (federation.unseen or federation.seen) for s in ts.gallery if s[1] > 0]
    if len(pool) < settings.canaries:
        raise ConfigError(f"record-level DP audit: only {len(pool)} test images can serve as canaries "
                          f"(--canaries {settings.canaries})")
    rng = np.random.default_rng([settings.seed, 0xCA1])
    picks = [pool[i] for i in sorted(rng.choice(len(pool), settings.canaries, replace=False))]
    labels = rng.integers(0, target.num_classes, settings.canaries)
    included = _inclusion(settings.canaries, settings.seed)
    extra = [(path, int(label), cam) for (path, _, cam), label, inc in zip(picks, labels, included) if inc]
    clients = [dataclasses.replace(target, train=target.train + extra)] + federation.clients[1:]
    engine = FederatedEngine(config, dataclasses.replace(federation, clients=clients), run, progress=progress,
                             log=lambda _: None, build=build_run)
    prepare_out_dir(run, overwrite=True, resume=False)
    summary = engine.run()
    model = Checkpoint.load(run / "ckpt.pt").load_model(target.name)
    out = probe_outputs(model, [p for p, _, _ in picks], height=config.data.height, width=config.data.width)
    logp = out.logits - np.logaddexp.reduce(out.logits, axis=1, keepdims=True)
    return logp[np.arange(len(picks)), labels], included, summary, target.name


def _client_level(config: RunConfig, federation: Federation, settings: DPAuditSettings, run: Path, progress: bool
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, Any], str | None]:
    included = _inclusion(settings.canaries, settings.seed)
    donor = federation.clients[0]
    two = [next(s for s in donor.train if s[1] == label) for label in (0, 1)]
    canaries = [ClientData(name=f"{CANARY_PREFIX}/{i}", domain=donor.domain, train=two)
                for i in range(settings.canaries) if included[i]]
    norm = settings.canary_norm * float(config.privacy.clip)

    class CanaryEngine(FederatedEngine):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.trainable = sorted(k for k in trainable_parameter_names(self.method, self.config)
                                    if k in self.global_state)
            self.shapes = {k: self.global_state[k].shape for k in self.trainable}
            inner = self.client_update

            def update(ctx):
                if not ctx.client.name.startswith(CANARY_PREFIX + "/"):
                    return inner(ctx)
                u = canary_direction(self.trainable, self.shapes, int(ctx.client.name.split("/")[1]), settings.seed)
                params = dict(ctx.model.named_parameters())
                with torch.no_grad():
                    for k in self.trainable:
                        params[k].copy_(ctx.global_state[k].double() + norm * u[k])
                return {"loss": 0.0}

            self.client_update = update

    engine = CanaryEngine(config, dataclasses.replace(federation, clients=federation.clients + canaries), run,
                          progress=progress, log=lambda _: None, build=build_run)
    theta0 = {k: engine.global_state[k].double().clone() for k in engine.trainable}
    prepare_out_dir(run, overwrite=True, resume=False)
    summary = engine.run()
    delta_theta = {k: engine.global_state[k].double() - theta0[k] for k in engine.trainable}
    scores = np.array([sum(float((delta_theta[k] * u[k]).sum()) for k in engine.trainable)
                       for u in (canary_direction(engine.trainable, engine.shapes, i, settings.seed)
                                 for i in range(settings.canaries))])
    return scores, included, summary, None


def run_dp_audit(config: RunConfig, out: Path, settings: DPAuditSettings | None = None, *, label: str = "run",
                 progress: bool = False) -> dict[str, Any]:
    """Train ``config`` once with canaries, then bound epsilon from below; the audit record."""
    from privreid.data.catalog import federation_for_config

    settings = (settings or DPAuditSettings()).validate()
    t = config.privacy
    if not (t.dp_sgd or t.client_dp):
        raise ConfigError(f"{label}: the DP audit needs a run trained with --dp-sgd or --client-dp")
    if t.target_epsilon is not None:
        config = config.with_values({"privacy.target_epsilon": None})
    federation = federation_for_config(config)
    run = Path(out)
    level = "record" if t.dp_sgd else "client"
    scores, included, summary, client = (_record_level if t.dp_sgd else _client_level)(
        config, federation, settings, run, progress)
    delta = dp_delta(config)
    result = audit_scores(scores, included, delta=delta, confidence=settings.confidence)
    accounted = _accounted(summary, client)
    return {"model": label, "level": level, "mechanism": "DP-SGD" if t.dp_sgd else "client-level DP (DP-FedAvg)",
            **result, "delta": delta, "epsilon_accounted": accounted,
            "audit": "FAILED" if result["epsilon_lower"] > accounted else "PASSED",
            "audited_client": client, "rounds": int(summary["evaluated_round"] or t.rounds),
            "canary": "random-label test images in the audited client's data" if t.dp_sgd else
            f"clients uploading a random direction of norm {settings.canary_norm:g} x clip"}


def dp_table(records: list[dict[str, Any]]) -> str:
    from privreid.io import format_table

    return format_table([{"model": r["model"], "level": r["level"], "canaries (in)": f"{r['canaries']} ({r['included']})",
                          "guesses": r["guesses"], "correct": r["correct"],
                          f"eps lower bound ({100 * r['confidence']:g}%)": f"{r['epsilon_lower']:.3f}",
                          "eps accounted": f"{r['epsilon_accounted']:.3f}", "audit": r["audit"]} for r in records])
