"""The federated engine: rounds, client selection, aggregation, evaluation, checkpoints.

It knows nothing about individual methods: a :class:`~.registry.Method`
supplies the parameter policy, the client update and the server strategy.

Memory.  Clients run one after another in one process; only one model is
resident.  Between rounds a client keeps only its local state (its
``policy.local`` keys) and its memory (a method's extra tensors; for methods
whose papers score the trained local model, ``keeps_trained_model``, one copy
of its shared keys), and the server keeps the global shared state.  Client
memories live in files under the run directory, loaded one at a time when
used (:mod:`.memory_store`), so they do not grow the process with the number
of clients.  Within
a round the server streams: each upload is checked, counted and folded into
the strategy's accumulator as it arrives (:class:`RoundInbox`,
:class:`~.strategy.Accumulator`) and then dropped, so a linear strategy
holds one running sum whatever the number of clients; only strategies that
need every upload at once (:class:`~.strategy.KeepUploads`) hold the list.

Determinism.  Every random draw is seeded from ``(seed, round, client)``
(:mod:`privreid.seeding`), so ``--resume`` from the checkpoint of round ``r``
continues exactly as the uninterrupted run.

Evaluation.  At every evaluated round, after aggregation: the global model
(if the method has one) on the seen and unseen test sets, then *every*
client's current personalised model on its seen test set (and on the unseen
ones when there is no global model), selected this round or not.  Which model
is personalised is the method's choice (``Method.keeps_trained_model``); it
is assembled by :func:`privreid.checkpoint.personal_state`, so
``load_model(ckpt, client=NAME)`` returns exactly the model scored.

Privacy boundary.  The only things that flow from a client to the server are
:class:`~.strategy.Upload` objects: the shared keys, the sample count and
scalar training metrics, plus any tensors a method's client update puts in
``ClientContext.upload_extra`` (DPPT's per-identity class centres).  Such
tensors stay in the global state as server-side method state (not model
keys); checkpoints store them apart, under ``server_state``.  From the server
to a client flows only what the strategy's ``configure`` returns for it.

Per-client server state.  What the server keeps about one client between
rounds (FedPav-CC's cluster model) is returned by the strategy's aggregation
(:class:`~.strategy.RoundResult`), owned by the engine
(``client_server_state``, in RAM: most methods keep none, FedPav-CC one model
per cluster), checkpointed under ``server_client_state`` and handed back to
``configure``.  Client memory is the client's own: the server never writes it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np

from privreid.checkpoint import MEMORY_HASHES_KEY, TRAINED_PREFIX, Checkpoint, personal_state, save_checkpoint
from privreid.config import RunConfig, evaluation_settings
from privreid.device import resolve_device
from privreid.precision import at_precision, check_precision, cuda_speedups
from privreid.data.types import ClientData, Federation, TestSet
from privreid.errors import ConfigError
from privreid.evaluation.metric_registry import metric_line, summary_keys
from privreid.evaluation.model_eval import evaluate_model
from privreid.log import progress_bar
from privreid.models.reid_net import is_classifier_key
from privreid.rundir import RUN_FILES, write_json_atomic
from privreid.seeding import derive_seed, rng_states, seed_everything
from privreid.federated.best import best_block
from privreid.federated.client import ClientContext
from privreid.federated.divergence import check_finite_states, check_finite_training, json_line
from privreid.federated.early_stop import evaluate_after_stop
from privreid.federated.heap import HeapTrimmer
from privreid.federated.memory_store import MEMORY_DIR, ClientMemories, ClientMemory, own_memory_files
from privreid.federated.policy import StateDict, clone_state, state_nbytes
from privreid.federated.registry import Method
from privreid.federated.resume import check_resume
from privreid.federated.strategy import Accumulator, RoundResult, Upload

_log = logging.getLogger(__name__)



def prepare_out_dir(out_dir: Path, *, overwrite: bool, resume: bool) -> None:
    """Refuse to clobber an existing run unless asked to overwrite or resume; the two refusals agree.

    A run killed before its first checkpoint leaves ``metrics.jsonl`` but no
    ``ckpt.pt``: ``train --resume`` starts it from round 0
    (:func:`privreid.federated.resume.check_resumable`), and this refusal
    says so.  ``overwrite`` deletes only what a run writes: :data:`RUN_FILES`
    and the client-memory files (:func:`~.memory_store.own_memory_files`),
    and refuses, naming it, anything else in ``client_memory/``.
    """
    existing = [f for f in RUN_FILES if (out_dir / f).exists() or (out_dir / f).is_symlink()]
    has_ckpt = (out_dir / "ckpt.pt").exists()
    if resume:
        if not has_ckpt:
            raise ConfigError(f"--resume: {out_dir} holds a run that stopped before its first checkpoint "
                              f"({', '.join(existing)}); start it again with --overwrite" if existing else
                              f"--resume: no checkpoint at {out_dir / 'ckpt.pt'}")
        return
    if existing and not overwrite:
        hint = ("pass --overwrite to replace it or --resume to continue it" if has_ckpt else
                "it stopped before its first checkpoint; pass --resume to start it from round 0 (nothing was "
                "done yet) or --overwrite")
        raise ConfigError(f"{out_dir} already holds a run ({', '.join(existing)}); {hint}")
    memories = own_memory_files(out_dir / MEMORY_DIR) if overwrite else []
    for f in existing:
        (out_dir / f).unlink()
    for path in memories:
        path.unlink()
    if memories and not any((out_dir / MEMORY_DIR).iterdir()):
        (out_dir / MEMORY_DIR).rmdir()


def selection_size(fraction: float, n: int) -> int:
    """``max(1, ceil(C N))`` (paper 002, Eq. 5: ``1 <= ceil(C N) <= N``).

    ``C N`` is rounded to 9 decimals first, so that float error in a product
    such as ``0.3 * 10 = 3.0000000000000004`` does not add a client.
    """
    return min(n, max(1, math.ceil(round(fraction * n, 9))))


class RoundInbox:
    """The server's receiving end of one round: every upload is checked, counted and aggregated as it arrives.

    :meth:`add` stops the run on a non-finite training loss
    (:func:`~.divergence.check_finite_training`: before the upload reaches
    the aggregate or a checkpoint), adds the upload's size to the round's
    upload bytes and folds it into ``accumulator``; the caller then drops
    the upload.  ``result()`` is the strategy's aggregate of everything
    added.
    """

    def __init__(self, accumulator: Accumulator, round_no: int, out_dir: Path):
        self.accumulator, self.round_no, self.out_dir = accumulator, round_no, out_dir
        self.bytes_up = 0
        self.received = 0

    def add(self, upload: Upload) -> None:
        check_finite_training([upload], self.round_no, self.out_dir)
        self.bytes_up += state_nbytes(upload.state)
        self.received += 1
        self.accumulator.add(upload)

    def result(self) -> RoundResult:
        return self.accumulator.result()


def mean_metrics(results: list[dict[str, float]]) -> dict[str, float]:
    if not results:
        return {}
    return {k: float(np.mean([r[k] for r in results])) for k in summary_keys()}


class FederatedEngine:
    """Runs one method on one federation and writes ``ckpt.pt``, ``metrics.jsonl``, ``summary.json``.

    ``build(config)`` gives the method (with its defenses) and the round
    observers (:class:`privreid.training.compose.RunPlan`; default :func:`privreid.training.compose.build_run`,
    whose observer is the privacy ledger).  Each observer sees every upload the
    server receives (``on_upload``); before every round each may stop the run
    (``before_round``), after it each adds its records (``after_round``), the
    checkpoint holds each one's ``state_dict`` under its ``key`` and
    ``summary.json`` its ``summary``; the engine knows nothing else about
    them, and never shows them client memory.
    """

    #: whether this process holds the clients' local states (the Flower server does not: its sites do)
    holds_client_states = True
    #: whether client memories are kept in files under the run directory (:mod:`.memory_store`) or in RAM
    client_memory_on_disk = True

    def __init__(self, config: RunConfig, federation: Federation, out_dir: str | os.PathLike, *,
                 progress: bool = True, log: Callable[[str], None] | None = None,
                 build: Callable[[RunConfig], Any] | None = None):
        self.config = config.validate()
        if build is None:
            from privreid.training.compose import build_run as build
        plan = build(config)
        self.method: Method = plan.method
        self.deviations: list[str] = plan.deviations
        self.federation = federation
        prepare = self.method.prepare_clients_for(config)
        self.clients: list[ClientData] = prepare(federation.clients) if prepare else federation.clients
        if not self.clients:
            raise ConfigError("the federation has no clients")
        self.out_dir = Path(out_dir)
        self.progress = progress
        self.log = log or _log.info
        self.device = resolve_device(config.train.device)
        check_precision(config.train.precision, self.device)  # the device's autocast (DP-SGD's rule: RunConfig.validate)
        self.policy = self.method.policy_for(config)
        self.client_update = self.method.make_client_update(config)
        self.strategy = self.method.strategy(config)
        self.client_start = self.method.make_client_start(config) if self.method.make_client_start else None
        # round observers (the privacy ledger): settings checked against the federation before anything is written
        self.observers: list[Any] = plan.observers(self.clients, self.clients_per_round())
        self.stopped: str | None = None
        self.record_hooks: list[Callable[[dict[str, Any]], None]] = []  # e.g. privreid train --logger
        for observer in self.observers:
            for note in observer.notes:
                self.log(f"note: {note}")
        self._initial_state()  # builds the model (loading weights may fail) before anything is written

    # -- state -----------------------------------------------------------------
    def _initial_state(self) -> None:
        seed_everything(derive_seed(self.config.train.seed, "init"))
        self.model = self.method.build_model(self.config)
        self.model.to(self.device)
        self.init_state = clone_state(self.model.state_dict())
        # freed heap back to the system as clients come and go (:mod:`.heap`)
        self.heap = HeapTrimmer.from_env(state_nbytes(self.init_state) / 2**20)
        self.global_state: StateDict = self.policy.shared(self.init_state)
        #: the local state of a client that has not trained yet (its classifier does not exist yet)
        self.initial_local = {k: v for k, v in self.policy.local(self.init_state).items()
                              if not is_classifier_key(k)}
        self.client_states: dict[str, StateDict] = {}
        self.client_memory: MutableMapping[str, MutableMapping] = (
            ClientMemories(self.out_dir / MEMORY_DIR) if self.client_memory_on_disk else {})
        #: the strategy's per-client server state (module docstring), by client name
        self.client_server_state: dict[str, dict[str, Any]] = {}
        self.metrics: list[dict[str, Any]] = []
        self.comm: list[dict[str, int]] = []
        self.start_round = 0

    def _restore(self) -> None:
        ckpt = Checkpoint.load(self.out_dir / "ckpt.pt", client_memory=False)
        check_resume(ckpt.run_config, self.config, ckpt.round)
        self.global_state = {**ckpt.global_state, **ckpt.server_state}
        self.client_states = ckpt.client_states
        self.client_server_state = ckpt.server_client_state  # absent before it existed: none kept
        if not self.client_memory_on_disk:
            self.client_memory = ckpt.client_memory
        elif ckpt.client_memory_files is not None:
            self.client_memory = ClientMemories(self.out_dir / MEMORY_DIR, ckpt.client_memory_files,
                                                ckpt.client_memory_hashes)
        else:  # memories stored in the checkpoint itself
            self.client_memory = ClientMemories(self.out_dir / MEMORY_DIR)
            for name, memory in ckpt.client_memory.items():
                self.client_memory[name] = memory
        observer_state = ckpt.observer_state
        if observer_state is None:  # backward compatibility: a checkpoint from before observers kept their own
            # state (the ledger read client memory); rebuilt once, here, from that checkpoint's client memories
            observer_state = {o.key: o.state_from_memories(self.client_memory) for o in self.observers}
        for observer in self.observers:
            observer.load_state_dict(observer_state.get(observer.key, {}))
        self.metrics = list(ckpt.metrics)
        self.comm = list(ckpt.comm)
        self.start_round = ckpt.round
        with open(self.out_dir / "metrics.jsonl", "w") as fh:  # drop lines of a round killed mid-way
            for rec in self.metrics:
                fh.write(json_line(rec))
        self.log(f"resuming {self.method.name} from round {self.start_round}")

    def configure(self, client: ClientData, round_index: int) -> StateDict:
        """What the server transmits to ``client`` this round: the strategy's ``configure``."""
        return self.strategy.configure(self.global_state, client, self.client_server_state.get(client.name, {}),
                                       round_index)

    def _load_client(self, client: ClientData, round_index: int, received: StateDict | None = None
                     ) -> tuple[StateDict, StateDict]:
        """Put what the server transmitted plus the client's local state into the model.

        Returns the transmitted model keys and the other transmitted entries
        (``ClientContext.received_extra``).  ``received=None``: computed here
        with :meth:`configure` (in-process).
        """
        self.model.reset_classifier(client.num_classes)
        self.client_memory.setdefault(client.name, {})
        if received is None:
            received = self.configure(client, round_index)
        model_keys = self.model.state_dict().keys()
        extra = {k: v for k, v in received.items() if k not in model_keys}
        if extra:
            received = {k: v for k, v in received.items() if k not in extra}
        local = self.client_states.get(client.name)
        if local is None:  # first participation: fresh classifier, initial local layers
            state = {**self.policy.local(self.init_state), **received}
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            assert all(is_classifier_key(k) for k in missing) and not unexpected
        else:
            self.model.load_state_dict({**received, **local}, strict=True)
        self.model.to(self.device)
        return received, extra

    def _load_global(self) -> None:
        state = (self.method.global_eval_state(self.global_state, self.client_states)
                 if self.method.global_eval_state else self.global_state)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        assert not unexpected

    # -- evaluation ------------------------------------------------------------
    def _eval(self, testset: TestSet) -> dict[str, float]:
        d, t = self.config.data, self.config.train
        return evaluate_model(at_precision(self.model, t.precision, self.device), testset, height=d.height,
                              width=d.width, device=self.device, flip=t.eval_flip, metric=t.eval_metric, ap=t.eval_ap,
                              num_workers=t.num_workers)

    def _record(self, rec: dict[str, Any]) -> None:
        self.metrics.append(rec)
        with open(self.out_dir / "metrics.jsonl", "a") as fh:
            fh.write(json_line(rec))
        for hook in self.record_hooks:
            hook(rec)

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

        The seen test set is the domain's own from ``federation.seen`` (with its
        modality, VI protocol and tracklets), used when the client holds that
        split; video clients hold it only there (their query/gallery are empty).
        """
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

    # -- the loop --------------------------------------------------------------
    def clients_per_round(self) -> int:
        """``m = max(1, ceil(C N))``: how many clients every round samples (paper 002, Eq. 5 / 9)."""
        fraction = self.config.train.client_fraction
        return selection_size(self.method.client_fraction if fraction is None else fraction, len(self.clients))

    def select_clients(self, round_index: int) -> list[ClientData]:
        """Random fraction C of the clients (paper 004 Alg. 1 line 4), seeded by round."""
        n = len(self.clients)
        k = self.clients_per_round()
        rng = np.random.default_rng(derive_seed(self.config.train.seed, "select", round_index))
        chosen = sorted(rng.choice(n, size=k, replace=False).tolist())
        return [self.clients[i] for i in chosen]

    def evaluates(self, round_no: int) -> bool:
        """Whether round ``round_no`` (1-based) ends with an evaluation (every ``eval_every`` if > 0, and the last)."""
        t = self.config.train
        return (t.eval_every > 0 and round_no % t.eval_every == 0) or round_no == t.rounds

    def train_client(self, client: ClientData, round_index: int, received: StateDict | None = None) -> Upload:
        """One client's part of a round: load its model, start (the method's client start), train it locally,
        keep its local keys (and, with ``keeps_trained_model``, its trained shared keys); the upload.

        ``received`` is what the server transmitted to this client; ``None``
        computes it here with the strategy's ``configure`` (in-process).  The
        Flower runtime computes it on the server and calls this on the site.
        """
        seed = derive_seed(self.config.train.seed, "client", round_index, client.name)
        seed_everything(seed)
        received, extra = self._load_client(client, round_index, received)
        ctx = ClientContext(model=self.model, client=client, round=round_index, config=self.config,
                            device=self.device, global_state=received, seed=seed,
                            progress=self.progress, memory=self.client_memory[client.name], received_extra=extra,
                            triplet_weight=self.method.triplet_weight_for(self.config))
        if self.client_start:
            self.client_start(ctx)
        train_metrics = self.client_update(ctx)
        state = self.model.state_dict()
        self.client_states[client.name] = clone_state(self.policy.local(state))
        shared = clone_state(self.policy.shared(state))  # one copy: the memory and the upload are only read
        if self.method.keeps_trained_model and self.config.train.client_memory == "full":
            ctx.memory.update({TRAINED_PREFIX + k: v for k, v in shared.items()})
        if isinstance(ctx.memory, ClientMemory):
            ctx.memory.mark_dirty()  # the update may have changed entries in place
            ctx.memory.spill(self.client_memory.round)  # written now, while the server folds the upload
        return Upload(client.name, {**shared, **clone_state(ctx.upload_extra)}, client.num_samples, train_metrics,
                      reports=clone_state(ctx.reports))

    def open_inbox(self, round_index: int) -> RoundInbox:
        """The round's inbox, folding into a fresh accumulator of the strategy against the current global state."""
        return RoundInbox(self.strategy.accumulator(self.global_state), round_index + 1, self.out_dir)

    def receive(self, inbox: RoundInbox, upload: Upload) -> None:
        """One upload arrives at the server: record the client's training metrics, then hand it to ``inbox``."""
        self._record({"round": inbox.round_no, "scope": "train", "client": upload.client, **upload.metrics})
        for observer in self.observers:  # e.g. the privacy ledger reads the upload's reports
            observer.on_upload(upload)
        inbox.add(upload)

    def collect_uploads(self, round_index: int, selected: list[ClientData], inbox: RoundInbox) -> None:
        """Train the selected clients one after another; each upload goes to :meth:`receive` as it is made.

        The Flower ServerApp overrides this to dispatch the round to the sites.
        """
        for client in progress_bar(selected, desc="clients", leave=False, enabled=self.progress and len(selected) > 1):
            self.receive(inbox, self.train_client(client, round_index))
            self.heap.after_client()

    def evaluate_round(self, round_no: int) -> None:
        """The global model, then every client's personalised model (module docstring, "Evaluation")."""
        self._eval_global(round_no)
        for client in self.clients:
            self._eval_local(round_no, client)

    def finish_round(self, round_index: int, inbox: RoundInbox, down_bytes: int) -> None:
        """The server's part of a round once every upload is in: aggregate, count bytes, evaluate, checkpoint."""
        round_no = round_index + 1
        seed_everything(derive_seed(self.config.train.seed, "server", round_index))
        result = inbox.result()
        self.global_state = result.global_state
        self.client_server_state.update(result.client_state)
        for rec in result.records:  # e.g. secure aggregation's
            self._record({"round": round_no, **rec})
        if self.method.communicates:
            self.comm.append({"round": round_no, "bytes_up": inbox.bytes_up, "bytes_down": down_bytes})
        for observer in self.observers:
            for rec in observer.after_round(round_no):
                self._record(rec)
        if self.evaluates(round_no):
            self.evaluate_round(round_no)
        self._checkpoint(round_no)

    def run(self, *, resume: bool = False) -> dict[str, Any]:
        t = self.config.train
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            self._restore()
        started = time.time()
        rounds = progress_bar(range(self.start_round, t.rounds), desc=self.method.name, initial=self.start_round,
                              total=t.rounds, enabled=self.progress)
        with cuda_speedups(self.device, t.cudnn_benchmark):
            for r in rounds:
                if not self.run_round(r):
                    break
        summary = self.summary(time.time() - started)
        write_json_atomic(self.out_dir / "summary.json", summary)
        return summary

    def run_round(self, round_index: int) -> bool:
        """Round ``round_index`` (0-based) from client selection to checkpoint; ``False`` if an observer stopped
        the run before it (the stop is logged and the last model evaluated, :func:`evaluate_after_stop`)."""
        if isinstance(self.client_memory, ClientMemories):
            self.client_memory.round = round_index + 1
        selected = self.select_clients(round_index)
        self.stopped = next(filter(None, (o.before_round(round_index, selected) for o in self.observers)), None)
        if self.stopped:
            self.log(self.stopped)
            evaluate_after_stop(self, round_index)
            return False
        down_bytes = state_nbytes(self.global_state) * len(selected)
        inbox = self.open_inbox(round_index)
        self.collect_uploads(round_index, selected, inbox)
        self.finish_round(round_index, inbox, down_bytes)
        return True

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
        """Final-round metrics (global and mean local), communication totals, ``best`` and ``deviations``.

        ``best`` is the last global evaluation or the mean of the
        ``--report-best`` best ones (:func:`.best.best_block`; ``None``
        without a global model); ``deviations`` lists where the run's recipe
        differs from its method's paper (:func:`privreid.deviations.deviations`).
        """
        last = max((m["round"] for m in self.metrics if m["scope"] in ("global", "local")), default=0)
        final = [m for m in self.metrics if m["round"] == last and m["scope"] in ("global", "local")]
        out: dict[str, Any] = {
            "method": self.method.name,
            "protocol": self.federation.protocol,
            "rounds": self.config.train.rounds,
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
        out["best"] = best_block(self.metrics, self.config.train.report_best)
        out["evaluation"] = evaluation_settings(self.config)
        out["precision"] = self.config.train.precision
        out["deviations"] = self.deviations
        return out
