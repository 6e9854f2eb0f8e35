"""The federated engine's round loop: client selection, local training, aggregation.

Each round ends with an evaluation (:mod:`.round_eval`, every ``eval_every`` rounds and the last) and a checkpoint
(:mod:`.checkpointing`, which also writes ``metrics.jsonl`` and ``summary.json`` and restores a ``--resume``).  A
:class:`~.registry.Method` supplies the parameter policy, the client update and the server strategy; the engine knows
nothing else about methods.

Memory.  Clients run one after another in one process; only one model is resident.  Between rounds a client keeps
only its ``policy.local`` keys and its memory (a method's extra tensors; with ``keeps_trained_model``, one copy of its
shared keys), in files loaded one at a time (:mod:`.memory_store`).  Within a round the server streams each upload
into the strategy's accumulator (:class:`RoundInbox`), so a linear strategy holds one running sum whatever the number
of clients; only :class:`~.strategy.KeepUploads` holds the list.

Determinism.  Every random draw is seeded from ``(seed, round, client)`` (:mod:`privreid.seeding`), so ``--resume``
from the checkpoint of round ``r`` continues exactly as the uninterrupted run.

Privacy boundary.  Only :class:`~.strategy.Upload` objects flow from a client to the server: the shared keys, the
sample count and scalar training metrics, plus any tensors the client update puts in ``ClientContext.upload_extra``
(DPPT's per-identity class centres), which stay in the global state as server-side method state (checkpointed under
``server_state``).  From the server to a client flows only what the strategy's ``configure`` returns for it.  The
server state a strategy keeps (per client and server-wide, :mod:`.strategy`) is checkpointed under
``server_client_state`` and handed back to it every round; client memory is the client's own: the server never
writes it."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np

from privreid.checkpoint import TRAINED_PREFIX, Checkpoint
from privreid.config import RunConfig
from privreid.device import resolve_device
from privreid.precision import check_precision, cuda_speedups
from privreid.data.types import ClientData, Federation
from privreid.errors import ConfigError
from privreid.log import progress_bar
from privreid.models.reid_net import is_classifier_key
from privreid.io import write_json_atomic
from privreid.rundir import MEMORY_DIR
from privreid.seeding import derive_seed, seed_everything
from privreid.federated.checkpointing import Checkpointing
from privreid.federated.client import ClientContext
from privreid.federated.divergence import check_finite_training
from privreid.federated.early_stop import evaluate_after_stop
from privreid.federated.heap import HeapTrimmer
from privreid.federated.memory_store import ClientMemories, ClientMemory
from privreid.federated.policy import StateDict, clone_state, state_nbytes
from privreid.federated.registry import Method
from privreid.federated.resume import load_for_resume
from privreid.federated.round_eval import RoundEvaluation
from privreid.federated.strategy import Accumulator, RoundResult, Upload

_log = logging.getLogger(__name__)



def selection_size(fraction: float, n: int) -> int:
    """``max(1, ceil(C N))`` (paper 002, Eq. 5: ``1 <= ceil(C N) <= N``); ``C N`` is rounded to 9 decimals first,
    so float error (``0.3 * 10 = 3.0000000000000004``) does not add a client."""
    return min(n, max(1, math.ceil(round(fraction * n, 9))))


class RoundInbox:
    """The server's receiving end of one round: every upload is checked, counted and aggregated as it arrives.

    :meth:`add` stops the run on a non-finite training loss (:func:`~.divergence.check_finite_training`: before the
    upload reaches the aggregate or a checkpoint), counts the upload's bytes and folds it into ``accumulator``; the
    caller then drops the upload.  ``result()`` is the strategy's aggregate of everything added."""

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


class FederatedEngine(RoundEvaluation, Checkpointing):
    """Runs one method on one federation and writes ``ckpt.pt``, ``metrics.jsonl``, ``summary.json``.

    ``build(config)`` gives the method (with its defenses) and the round observers
    (:class:`privreid.composition.RunPlan`: :func:`privreid.composition.build_run`, whose observer is the privacy
    ledger, resolved by the caller, the composition root's side of the layers).  Each observer sees every upload the
    server receives (``on_upload``), may stop the run before a round (``before_round``), adds its records after it
    (``after_round``); the checkpoint holds its ``state_dict`` under its ``key`` and ``summary.json`` its ``summary``.
    The engine knows nothing else about them and never shows them client memory."""

    #: whether this process holds the clients' local states (the Flower server does not: its sites do)
    holds_client_states = True
    #: whether client memories are kept in files under the run directory (:mod:`.memory_store`) or in RAM
    client_memory_on_disk = True

    def __init__(self, config: RunConfig, federation: Federation, out_dir: str | os.PathLike, *,
                 progress: bool = True, log: Callable[[str], None] | None = None,
                 build: Callable[[RunConfig], Any]):
        self.config = config.validate()
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
        self.device = resolve_device(config.runtime.device)
        check_precision(config.runtime.precision, self.device)  # the device's autocast (DP-SGD's rule: RunConfig.validate)
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
        seed_everything(derive_seed(self.config.runtime.seed, "init"))
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
        #: the strategy's server state (module docstring): by client name, the server-wide under ``SERVER_ENTRY``
        self.client_server_state: dict[str, dict[str, Any]] = {}
        self.metrics: list[dict[str, Any]] = []
        self.comm: list[dict[str, int]] = []
        self.start_round = 0

    def configure(self, client: ClientData, round_index: int) -> StateDict:
        """What the server transmits to ``client`` this round: the strategy's ``configure``."""
        return self.strategy.configure(self.global_state, client, self.client_server_state.get(client.name, {}),
                                       round_index)

    def _load_client(self, client: ClientData, round_index: int, received: StateDict | None = None
                     ) -> tuple[StateDict, StateDict]:
        """Put what the server transmitted plus the client's local state into the model; returns the transmitted
        model keys and the other entries (``ClientContext.received_extra``).  ``received=None``: :meth:`configure`'s."""
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

    # -- the loop --------------------------------------------------------------
    def clients_per_round(self) -> int:
        """``m = max(1, ceil(C N))``: how many clients every round samples (paper 002, Eq. 5 / 9)."""
        fraction = self.config.federation.client_fraction
        return selection_size(self.method.client_fraction if fraction is None else fraction, len(self.clients))

    def select_clients(self, round_index: int) -> list[ClientData]:
        """Random fraction C of the clients (paper 004 Alg. 1 line 4), seeded by round."""
        n = len(self.clients)
        k = self.clients_per_round()
        rng = np.random.default_rng(derive_seed(self.config.runtime.seed, "select", round_index))
        chosen = sorted(rng.choice(n, size=k, replace=False).tolist())
        return [self.clients[i] for i in chosen]

    def train_client(self, client: ClientData, round_index: int, received: StateDict | None = None) -> Upload:
        """One client's part of a round: load its model, start (the method's client start), train it locally,
        keep its local keys (and, with ``keeps_trained_model``, its trained shared keys); the upload.

        ``received`` is what the server transmitted to this client; ``None`` computes it here with the strategy's
        ``configure`` (in-process).  The Flower runtime computes it on the server and calls this on the site."""
        seed = derive_seed(self.config.runtime.seed, "client", round_index, client.name)
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
        if self.method.keeps_trained_model and self.config.federation.client_memory == "full":
            ctx.memory.update({TRAINED_PREFIX + k: v for k, v in shared.items()})
        if isinstance(ctx.memory, ClientMemory):
            ctx.memory.mark_dirty()  # the update may have changed entries in place
            ctx.memory.spill(self.client_memory.round)  # written now, while the server folds the upload
        return Upload(client.name, {**shared, **clone_state(ctx.upload_extra)}, client.num_samples, train_metrics,
                      reports=clone_state(ctx.reports))

    def open_inbox(self, round_index: int) -> RoundInbox:
        """The round's inbox, folding into a fresh accumulator of the strategy, given the server state it kept,
        against the current global state."""
        strategy = self.strategy.with_server_state(self.client_server_state)
        return RoundInbox(strategy.accumulator(self.global_state), round_index + 1, self.out_dir)

    def receive(self, inbox: RoundInbox, upload: Upload) -> None:
        """One upload arrives at the server: record the client's training metrics, then hand it to ``inbox``."""
        self._record({"round": inbox.round_no, "scope": "train", "client": upload.client, **upload.metrics})
        for observer in self.observers:  # e.g. the privacy ledger reads the upload's reports
            observer.on_upload(upload)
        inbox.add(upload)

    def collect_uploads(self, round_index: int, selected: list[ClientData], inbox: RoundInbox) -> None:
        """Train the selected clients one after another; each upload goes to :meth:`receive` as it is made.
        The Flower ServerApp overrides this to dispatch the round to the sites."""
        for client in progress_bar(selected, desc="clients", leave=False, enabled=self.progress and len(selected) > 1):
            self.receive(inbox, self.train_client(client, round_index))
            self.heap.after_client()

    def finish_round(self, round_index: int, inbox: RoundInbox, down_bytes: int) -> None:
        """The server's part of a round once every upload is in: aggregate, count bytes, evaluate, checkpoint."""
        round_no = round_index + 1
        seed_everything(derive_seed(self.config.runtime.seed, "server", round_index))
        result = inbox.result()
        self.global_state = result.global_state
        self.client_server_state.update(result.client_state)
        for rec in result.records:  # e.g. secure aggregation's
            self._record({"round": round_no, **rec})
        if self.method.communicates:
            self.comm.append({"round": round_no, "bytes_up": inbox.bytes_up, "bytes_down": down_bytes})
        for observer in self.observers:  # e.g. the adversary's record reads the defenses' selection records
            observer.on_round_result(round_no, result)
        for observer in self.observers:
            for rec in observer.after_round(round_no):
                self._record(rec)
        if self.evaluates(round_no):
            self.evaluate_round(round_no)
        self._checkpoint(round_no)

    def run(self, *, resume: bool | Checkpoint = False) -> dict[str, Any]:
        """Train the remaining rounds and write ``summary.json``; ``resume``: continue from the checkpoint
        :func:`~.resume.resume_checkpoint` returned (``True``: load it here, :func:`~.resume.load_for_resume`)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if resume is True:
            resume = load_for_resume(self.out_dir, self.config)
        if resume:
            self._restore(resume)
        started = time.time()
        total = self.config.federation.rounds
        rounds = progress_bar(range(self.start_round, total), desc=self.method.name, initial=self.start_round,
                              total=total, enabled=self.progress)
        with cuda_speedups(self.device, self.config.runtime.cudnn_benchmark):
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
