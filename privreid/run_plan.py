"""A run's plan, readable before a GPU-day is spent: ``privreid train --dry-run`` (and ``reproduce --dry-run``).

:func:`run_plan` resolves everything a run would do without training or writing anything: the resolved
configuration, the learning rate of every parameter group in every round
(:func:`privreid.federated.lr_schedule.lr_table`), how every test set is ranked (metric, flip, protocol) and the run's
deviations from its paper and from the authors' code (:func:`privreid.deviations.deviations`: each sentence names its
source, a paper section or a reference file).  :func:`render_plan` prints it for a person; ``--json`` prints the plan.
"""

from __future__ import annotations

from typing import Any

from privreid.config import RunConfig, evaluation_settings
from privreid.data.types import Federation
from privreid.federated.registry import Method


def run_plan(config: RunConfig, method: Method, federation: Federation | None = None,
             datasets: dict[str, str] | None = None) -> dict[str, Any]:
    """``{"config", "lr_schedule", "lr", "evaluation", "deviations"}`` of ``config`` (validated first), training
    ``method`` (:func:`privreid.composition.method_of`).

    ``lr`` maps each parameter group to its rate in every round (at the round's first step).  ``evaluation`` holds the
    run's ranking settings and, given the ``federation``, ``testsets``: each test set's split (seen / unseen) and
    ranking protocol.  ``datasets`` (dataset name -> the format that read it), when given, is the plan's ``datasets``.
    """
    from privreid.deviations import deviations
    from privreid.evaluation.model_eval import describe_protocol
    from privreid.federated.lr_schedule import get_schedule, lr_table

    config.validate()
    evaluation: dict[str, Any] = evaluation_settings(config)
    if federation is not None:
        evaluation["testsets"] = {ts.name: {"split": split, "protocol": describe_protocol(ts, config.evaluation.ap)}
                                  for split, testsets in (("seen", federation.seen), ("unseen", federation.unseen))
                                  for ts in testsets}
    schedule = get_schedule(config)
    return {
        "config": config.to_dict(),
        **({"datasets": datasets} if datasets is not None else {}),
        "lr_schedule": f"{schedule.name}: {schedule.describe(config)}",
        "lr": lr_table(config, method),
        "evaluation": evaluation,
        "deviations": deviations(config, method),
    }


def _rate_spans(rates: dict[str, list[float]]) -> list[str]:
    """One line per span of rounds over which no group's rate changes: ``rounds 1-20: backbone 0.01, head 0.1``."""
    groups = list(rates)
    n = len(rates[groups[0]]) if groups else 0
    lines, start = [], 0
    for r in range(1, n + 1):
        if r == n or any(rates[g][r] != rates[g][start] for g in groups):
            span = f"round {start + 1}" if r - start == 1 else f"rounds {start + 1}-{r}"
            lines.append(f"  {span}: " + ", ".join(f"{g} {rates[g][start]:.6g}" for g in groups))
            start = r
    return lines


def render_plan(plan: dict[str, Any]) -> str:
    """The plan as text: configuration, learning rates by span of rounds, evaluation, deviations."""
    import yaml

    ev = plan["evaluation"]
    lines = ["configuration (resolved):"]
    lines += ["  " + line for line in yaml.safe_dump(plan["config"], sort_keys=False).splitlines()]
    if "datasets" in plan:
        lines.append("datasets: " + ", ".join(f"{name} ({fmt})" for name, fmt in plan["datasets"].items()))
    lines += [f"learning rates ({plan['lr_schedule']}), at each round's first step:", *_rate_spans(plan["lr"])]
    lines.append(f"evaluation: metric {ev['metric']}, flip {'on' if ev['flip'] else 'off'}, AP {ev['ap']}")
    for name, ts in ev.get("testsets", {}).items():
        lines.append(f"  {name} ({ts['split']}): {ts['protocol']}")
    lines.append(f"deviations ({len(plan['deviations'])}):" if plan["deviations"] else "deviations: none")
    lines += [f"  - {d}" for d in plan["deviations"]]
    return "\n".join(lines)
