"""Evaluation of a round: the global model and every client's personalised model, scored after aggregation.

At every evaluated round (:meth:`RoundEvaluation.evaluates`: every ``eval_every`` rounds and the last), after
aggregation: the global model (if the method has one) on the seen and unseen test sets, then *every* client's current
personalised model (``Method.keeps_trained_model``, :func:`privreid.checkpoint.personal_state`) on its seen test set
(and on the unseen ones when there is no global model), selected this round or not.

:class:`RoundEvaluation` is a part of :class:`~.engine.FederatedEngine`, whose state it reads; each score becomes a
metric record (:meth:`~.checkpointing.Checkpointing._record`).  A round observer with
``on_global_model(round_no, model, testsets, height=, width=, device=, flip=, metric=) -> records`` scores the loaded
global model itself after it (an adversary's record: a backdoor's ASR per round), so the engine names no attack."""

from __future__ import annotations

import numpy as np

from privreid.checkpoint import personal_state
from privreid.data.types import ClientData, TestSet
from privreid.evaluation.metric_registry import metric_line, summary_keys
from privreid.evaluation.model_eval import evaluate_model
from privreid.models.reid_net import is_classifier_key
from privreid.precision import at_precision
from privreid.federated.policy import StateDict


def mean_metrics(results: list[dict[str, float]]) -> dict[str, float]:
    if not results:
        return {}
    return {k: float(np.mean([r[k] for r in results])) for k in summary_keys()}


class RoundEvaluation:
    """The engine's evaluation (module docstring)."""

    def _load_global(self) -> None:
        state = (self.method.global_eval_state(self.global_state, self.client_states)
                 if self.method.global_eval_state else self.global_state)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        assert not unexpected

    def _eval(self, testset: TestSet) -> dict[str, float]:
        d, e, r = self.config.data, self.config.evaluation, self.config.runtime
        return evaluate_model(at_precision(self.model, r.precision, self.device), testset, height=d.height,
                              width=d.width, device=self.device, flip=e.flip, metric=e.metric, ap=e.ap,
                              num_workers=r.num_workers)

    def personal_state(self, client: ClientData) -> StateDict:
        """The client's current personalised model (see the module docstring); classifier only once trained."""
        model_keys = {k: v for k, v in self.global_state.items() if k in self.init_state}
        return personal_state(model_keys, self.client_states.get(client.name, self.initial_local),
                              self.client_memory.get(client.name, {}))

    def _load_personal(self, client: ClientData) -> None:
        state = self.personal_state(client)
        self.model.reset_classifier(client.num_classes if any(is_classifier_key(k) for k in state) else 0)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        assert not unexpected and not missing, (missing[:3], unexpected[:3])
        self.model.to(self.device)

    def _eval_local(self, round_no: int, client: ClientData) -> None:
        """The client's personalised model on its domain's seen test set and, without a global model, on the unseen ones.

        The seen test set is the domain's own from ``federation.seen`` (with its modality, VI protocol and
        tracklets), used when the client holds that split; video clients hold it only there (empty query/gallery)."""
        sets: list[tuple[str, TestSet]] = []
        if (client.query and client.gallery) or client.tracklets is not None:
            sets += [("seen", ts) for ts in self.federation.seen if ts.name == client.domain]
        if not self.method.has_global_model:
            sets += [("unseen", ts) for ts in self.federation.unseen]
        if not sets:
            return
        self._load_personal(client)
        for split, ts in sets:
            res = self._eval(ts)
            self._record({"round": round_no, "scope": "local", "client": client.name, "split": split,
                          "testset": ts.name, **res})

    def _eval_global(self, round_no: int) -> None:
        if not self.method.has_global_model:
            return
        self._load_global()
        for split, sets in (("seen", self.federation.seen), ("unseen", self.federation.unseen)):
            for ts in sets:
                res = self._eval(ts)
                self._record({"round": round_no, "scope": "global", "split": split, "testset": ts.name, **res})
                self.log(f"round {round_no} global {split:6s} {ts.name:12s} "
                         + metric_line(res))
        d, e = self.config.data, self.config.evaluation
        for observer in self.observers:  # the optional hook of the module docstring
            hook = getattr(observer, "on_global_model", None)
            if hook is None:
                continue
            for rec in hook(round_no, at_precision(self.model, self.config.runtime.precision, self.device),
                            [*self.federation.seen, *self.federation.unseen], height=d.height, width=d.width,
                            device=self.device, flip=e.flip, metric=e.metric):
                self._record(rec)

    def evaluates(self, round_no: int) -> bool:
        """Whether round ``round_no`` (1-based) ends with an evaluation (every ``eval_every`` if > 0, and the last)."""
        every = self.config.evaluation.every
        return (every > 0 and round_no % every == 0) or round_no == self.config.federation.rounds

    def evaluate_round(self, round_no: int) -> None:
        """The global model, then every client's personalised model (module docstring, "Evaluation")."""
        self._eval_global(round_no)
        for client in self.clients:
            self._eval_local(round_no, client)
