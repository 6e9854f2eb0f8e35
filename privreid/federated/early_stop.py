"""A run that the DP budget stops early still reports its final model.

A round observer (:meth:`privreid.defenses.PrivacyLedger.before_round`) ends training before a round whose
accounting would exceed ``--target-epsilon``; the last completed round may
not be an evaluation round (``--eval-every``).  :func:`evaluate_after_stop`
then evaluates the model of that round exactly as an evaluation round would
(the global model; without one, each trained client's personalised model)
and re-writes the checkpoint, so ``summary.json`` carries metrics and the
right ``evaluated_round``.
"""

from __future__ import annotations


def evaluate_after_stop(engine, rounds_done: int) -> None:
    """Evaluate the model after ``rounds_done`` completed rounds unless that round was evaluated already."""
    if rounds_done == 0 or any(m["round"] == rounds_done and m["scope"] in ("global", "local")
                               for m in engine.metrics):
        return
    if not engine.method.has_global_model:
        for client in engine.clients:
            if client.name in engine.client_states:
                engine._load_client(client, rounds_done - 1, engine.global_state)
                engine._eval_local(rounds_done, client)
    engine._eval_global(rounds_done)
    engine._checkpoint(rounds_done)
