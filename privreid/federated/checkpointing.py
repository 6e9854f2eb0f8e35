"""What a run writes and reads back: ``metrics.jsonl`` records, ``ckpt.pt`` (keys: :mod:`privreid.checkpoint`),
``summary.json``, and the restore of a ``--resume`` from the checkpoint :func:`~.resume.resume_checkpoint` loaded.

:class:`Checkpointing` is a part of :class:`~.engine.FederatedEngine`, whose state it writes and restores."""

from __future__ import annotations

from typing import Any

from privreid.checkpoint import MEMORY_HASHES_KEY, Checkpoint, save_checkpoint
from privreid.config import evaluation_settings
from privreid.evaluation.metric_registry import summary_keys
from privreid.rundir import MEMORY_DIR
from privreid.seeding import rng_states
from privreid.federated.best import best_block
from privreid.federated.divergence import check_finite_states, json_line
from privreid.federated.memory_store import ClientMemories
from privreid.federated.policy import StateDict
from privreid.federated.round_eval import mean_metrics


class Checkpointing:
    """The engine's run files (module docstring)."""

    def _record(self, rec: dict[str, Any]) -> None:
        self.metrics.append(rec)
        with open(self.out_dir / "metrics.jsonl", "a") as fh:
            fh.write(json_line(rec))
        for hook in self.record_hooks:
            hook(rec)

    def _restore(self, ckpt: Checkpoint) -> None:
        """Continue from ``ckpt`` (:func:`~.resume.resume_checkpoint`: loaded and checked once, memories unread)."""
        self.global_state = {**ckpt.global_state, **ckpt.server_state}
        self.client_states = ckpt.client_states
        self.client_server_state = ckpt.server_client_state
        # on disk: the files the checkpoint names, read when used; in RAM (the Flower server): the checkpoint's
        self.client_memory = (ClientMemories(self.out_dir / MEMORY_DIR, ckpt.client_memory_files,
                                             ckpt.client_memory_hashes) if self.client_memory_on_disk else
                              ckpt.client_memory)
        for observer in self.observers:
            observer.load_state_dict(ckpt.observer_state.get(observer.key, {}))
        self.metrics = list(ckpt.metrics)
        self.comm = list(ckpt.comm)
        self.start_round = ckpt.round
        with open(self.out_dir / "metrics.jsonl", "w") as fh:  # drop lines of a round killed mid-way
            for rec in self.metrics:
                fh.write(json_line(rec))
        self.log(f"resuming {self.method.name} from round {self.start_round}")

    def _checkpoint(self, round_no: int) -> None:
        check_finite_states({"the global model": self.global_state,
                             **{f"client {name}'s local state": state for name, state in self.client_states.items()}},
                            round_no, self.out_dir)
        memories = self.client_memory
        on_disk = isinstance(memories, ClientMemories)
        files = memories.flush() if on_disk else None  # every write done: the checkpoint records their hashes
        save_checkpoint({
            "method": self.method.name,
            "round": round_no,
            "config": self.config.to_dict(),
            "model_config": self.model.model_config(),
            # model keys only, so any checkpoint reader can load them; method state apart
            "global_state": {k: v for k, v in self.global_state.items() if k in self.init_state},
            "server_state": {k: v for k, v in self.global_state.items() if k not in self.init_state},
            "has_global_model": self.method.has_global_model,
            # local keys the global model needs for evaluation (FedBN's averaged norms)
            "global_eval_extra": self._global_eval_extra(),
            "client_states": self.client_states,
            "server_client_state": self.client_server_state,
            "observer_state": {o.key: o.state_dict() for o in self.observers},  # the privacy ledger's record
            **({"client_memory_files": files, MEMORY_HASHES_KEY: memories.hashes_of(files)} if on_disk else
               {"client_memory": memories}),
            **({"initial_local_state": self.initial_local} if self.holds_client_states else {}),
            "client_classes": {c.name: c.num_classes for c in self.clients},
            "audit_holdout": self.federation.holdout,  # images kept out of training (--audit-holdout)
            "metrics": self.metrics,
            "comm": self.comm,
            "rng": rng_states(),
        }, self.out_dir / "ckpt.pt")
        if on_disk:
            memories.prune(files)

    def _global_eval_extra(self) -> StateDict:
        if not self.method.global_eval_state or not self.client_states:
            return {}
        state = self.method.global_eval_state(self.global_state, self.client_states)
        return {k: v for k, v in state.items() if k not in self.global_state}

    def summary(self, wall_time: float) -> dict[str, Any]:
        """Final-round metrics (global and mean local), communication totals, ``best`` (the last global evaluation
        or the mean of the ``--report-best`` best ones, :func:`.best.best_block`; ``None`` without a global model) and
        ``deviations`` (:func:`privreid.deviations.deviations`)."""
        last = max((m["round"] for m in self.metrics if m["scope"] in ("global", "local")), default=0)
        final = [m for m in self.metrics if m["round"] == last and m["scope"] in ("global", "local")]
        out: dict[str, Any] = {
            "method": self.method.name,
            "protocol": self.federation.protocol,
            "rounds": self.config.federation.rounds,
            "clients": [c.name for c in self.clients],
            "evaluated_round": last,
            "wall_time_s": round(wall_time, 2),
            "checkpoint": str(self.out_dir / "ckpt.pt"),
            **{o.key: o.summary(self.metrics, self.stopped) for o in self.observers},
        }
        for scope in ("global", "local"):
            for split in ("seen", "unseen"):
                recs = [m for m in final if m["scope"] == scope and m["split"] == split]
                if recs:
                    out[f"{scope}_{split}"] = mean_metrics(recs)
                    out[f"{scope}_{split}_per_testset"] = {
                        (m["testset"] if scope == "global" else f"{m['client']}@{m['testset']}"):
                            {**{k: m[k] for k in summary_keys()},
                             **({"non_finite_features": True} if m.get("non_finite_features") else {})} for m in recs}
        out["comm_bytes_up"] = sum(c["bytes_up"] for c in self.comm)
        out["comm_bytes_down"] = sum(c["bytes_down"] for c in self.comm)
        out["best"] = best_block(self.metrics, self.config.evaluation.report_best)
        out["evaluation"] = evaluation_settings(self.config)
        out["precision"] = self.config.runtime.precision
        out["deviations"] = self.deviations
        return out
