"""The tables the commands print: each command's records rendered as text (``privreid eval`` ...)."""

from __future__ import annotations

from typing import Any

from privreid.io import format_table


def eval_report(rows: list[dict[str, Any]], *, corruption: str | None, corrupt: str, severity: str,
                pixel_scale: str, repeats: int, seed: int) -> str:
    """``privreid eval``'s output for its records (:func:`privreid.api.evaluate_checkpoint`): the table (R1 / R5 /
    R10 / mAP / mINP, a small DG benchmark's mean (std) over its splits, or clean and corrupted mean (std)), the
    run's backdoor table, and the protocol's lines; the options as the command was given them."""
    from privreid.evaluation.backdoor import backdoor_columns
    from privreid.evaluation.corrupted_eval import is_scaled
    from privreid.evaluation.metric_registry import headline, summary_columns

    if rows and "protocol" in rows[0]:
        return "\n".join([format_table([{"testset": r["testset"], **{key: f"{100 * r[k]:.1f}" + (
            f" ({100 * r['std'][k]:.1f})" if "std" in r else "") for k, key in summary_columns()}}
            for r in rows]),
            f"mean (std) over {rows[0]['splits']} split(s), seed {rows[0]['seed']}" if "std" in rows[0]
            else "mean over the queries, each ranked against its own gallery" if rows[0]["protocol"] == "g100"
            else "mean over the queries, ranked against one gallery"])
    if corruption is None:
        lines = [format_table([{"testset": r["testset"] + (f" ({r['mode']})" if "mode" in r else ""),
                                **{label: r[k] for k, label in summary_columns()}} for r in rows])]
        measured = [r for r in rows if "backdoor" in r]
        if measured:
            lines += [f"backdoor of the run: {measured[0]['backdoor']['trigger']}, its whole trigger on every query "
                      "(ASR / ASR@k: a target image at rank 1 / within rank k, over the queries of other identities;"
                      " tmAP: their mAP with the target as the only match; ASR clean gallery: rank 1 without the "
                      "attacker's own images of the target)",
                      format_table([{"testset": r["testset"], **backdoor_columns(r["backdoor"])} for r in measured])]
        return "\n".join(lines)

    def mean_std(r: dict, key: str) -> str:
        return f"{100 * r['mean'][key]:.1f} ({100 * r['std'][key]:.1f})"

    protocol = "CIL-ReID protocol" + (", scaled" if rows and is_scaled(rows[0]["pixel_scale"]) else "")
    return "\n".join([
        format_table([{"testset": r["testset"], **{f"clean {label}": r["clean"][k] for k, label in headline()},
                       **{label: mean_std(r, k) for k, label in headline()}} for r in rows]),
        f"corrupted {corrupt} ({protocol}): {', '.join(rows[0]['corruptions']) if rows else '-'}; "
        f"severity {severity}; pixel scale {pixel_scale}; mean (std) over {repeats} repeat(s), seed {seed}",
        *(f"deviation: {line}" for line in (rows[0]["deviations"] if rows else []))])


def attack_report(records: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """``privreid attack``'s report: the budget, then clean vs attacked R1 / mAP / mINP in L2RW+'s Table IX
    layout (:func:`privreid.retrieval_attacks.retrieval.format_table_ix`)."""
    from privreid.retrieval_attacks.retrieval import format_table_ix

    caption = (f"Retrieval under attack (target: {settings['target']}; eps = {settings['eps'] * 255:.3g}/255, "
               f"alpha = {settings['alpha'] * 255:.3g}/255, {settings['steps']} steps). R1 / mAP / mINP in %; "
               f"↓ is the relative drop (clean - attacked) / clean.")
    return f"{caption}\n\n{format_table_ix(records)}\n"
