"""Parallel clients: the in-process engine whose local training runs on Flower's simulation engine (Ray).

``privreid train --parallel-clients K`` runs :class:`ParallelEngine`: the
:class:`~privreid.federated.engine.FederatedEngine` with one piece swapped,
:meth:`ParallelEngine.collect_uploads`, which sends the round's selected
clients to Flower's simulation engine (``flwr.simulation.run_simulation``,
Ray backend) and keeps up to ``K`` of them training at the same time.
Everything else is the engine's own code, run in this process: selection,
what each client receives (the strategy's ``configure``), aggregation with
the method's strategy and defences, the privacy ledger, evaluation,
``ckpt.pt`` (the same format) and ``--resume``.

Workers.  Each Ray actor runs :data:`client_app`, which builds the run's
engine once per process (:func:`worker_engine`: the same configuration,
data and seeds) and calls :meth:`FederatedEngine.train_client` for the
client a message names, on what the server transmitted.  Each client gets
``threads`` CPU threads (Ray's ``num_cpus``, and ``torch.set_num_threads``
in the worker) and, on CUDA, ``1 / K`` of the device (``num_gpus``).  Ray
admits ``K`` clients at a time: a local Ray is started with ``K * threads``
CPUs; on a cluster (``RAY_ADDRESS`` set, see docs/parallel-clients.md) the
cluster's resources decide, and ``K`` bounds the messages in flight.

Privacy boundary.  A train reply carries the upload (``upload``, ``train``
and, under DP-SGD, ``privacy-ledger``: what a Flower site sends) and the
client's own state (``client-state``: its local keys and memory, which the
in-process engine also keeps for it).  The client's state goes straight to
the client's store (``client_states``, the on-disk client memories); the
rest passes the Flower runtime's privacy gate
(:func:`~.messages.check_reply`) before it becomes the
:class:`~privreid.federated.strategy.Upload` that the strategy and the
observers see.

Determinism.  Every client seeds its own stream from ``(seed, round,
client)`` and the uploads are folded in selection order (a reply that
arrives early waits for the ones before it), so with the same thread count
per client the run equals the sequential engine's bit for bit
(``tests/test_parallel_clients.py``).  Memory: the server holds at most
``K`` replies and client states at a time, whatever the number of clients.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from ..config import RunConfig
from ..data.catalog import federation_for_config
from ..data.types import ClientData, Federation
from ..errors import ConfigError
from ..federated.engine import FederatedEngine, RoundInbox
from ..federated.memory_store import ClientMemories
from ..federated.strategy import Upload
from ..plugins import load_plugins
from ..seeding import derive_seed, seed_everything
from .messages import (GLOBAL, LEDGER, RUN, TRAIN, UPLOAD, FlowerRunError, check_reply, ledger_keys,
                       parse_run_record, record_to_state, run_record, scalar_metrics, state_to_record)

#: the record of a train message and its reply that holds the client's own state (local keys and memory)
CLIENT_STATE = "client-state"
#: how often the server polls the simulation for replies, in seconds
POLL_S = 0.005


def check_parallel_clients(parallel_clients: int, clients_per_round: int) -> None:
    """Refuse a ``--parallel-clients`` below 1 or above the number of clients a round trains."""
    if parallel_clients < 1:
        raise ConfigError(f"--parallel-clients must be >= 1 (got {parallel_clients})")
    if parallel_clients > clients_per_round:
        raise ConfigError(f"--parallel-clients {parallel_clients} exceeds the {clients_per_round} client(s) "
                          "trained per round")


# ----------------------------------------------------------------------------- the client's own state on the wire
def pack_client_state(local: dict | None, memory: dict) -> ConfigRecord:
    """A client's local keys (``None`` before its first round) and memory as one ``torch.save`` blob."""
    buffer = io.BytesIO()
    torch.save({"local": local, "memory": dict(memory)}, buffer)
    return ConfigRecord({"blob": buffer.getvalue()})


def unpack_client_state(record: ConfigRecord) -> tuple[dict | None, dict]:
    """The inverse of :func:`pack_client_state` (tensors and containers only: ``weights_only``)."""
    payload = torch.load(io.BytesIO(bytes(record["blob"])), map_location="cpu", weights_only=True)
    return payload["local"], payload["memory"]


# ----------------------------------------------------------------------------- the worker side
class WorkerEngine(FederatedEngine):
    """The run's engine in a Ray worker: trains the clients it is sent; writes nothing."""

    client_memory_on_disk = False

    def __init__(self, config: RunConfig):
        super().__init__(config, federation_for_config(config), tempfile.gettempdir(), progress=False,
                         log=lambda msg: None)
        self.by_name = {c.name: c for c in self.clients}


@functools.lru_cache(maxsize=1)
def worker_engine(config_json: str) -> WorkerEngine:
    """The worker's engine for the run configuration ``config_json``, built once per process, after the driver's
    plugins (installed, and $PRIVREID_PLUGINS, which the command line exports): the run's method may be one."""
    load_plugins()
    return WorkerEngine(RunConfig.from_dict(json.loads(config_json)).validate())


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One client's local training; the reply holds its upload and its own state (module docstring)."""
    _, _, run = parse_run_record(msg.content)
    torch.set_num_threads(int(run["threads"]))
    engine = worker_engine(str(run["config"]))
    client = engine.by_name[str(run["client"])]
    local, memory = unpack_client_state(msg.content.config_records[CLIENT_STATE])
    engine.client_states.clear()
    engine.client_memory.clear()
    if local is not None:
        engine.client_states[client.name] = local
    engine.client_memory[client.name] = memory
    upload = engine.train_client(client, int(run["round"]), received=record_to_state(msg.content.array_records[GLOBAL]))
    content = RecordDict({UPLOAD: state_to_record(upload.state), TRAIN: scalar_metrics(upload.metrics),
                          CLIENT_STATE: pack_client_state(engine.client_states[client.name],
                                                          engine.client_memory[client.name])})
    if upload.reports:  # DP-SGD's accountant, for the server's privacy ledger
        content[LEDGER] = state_to_record(upload.reports)
    return Message(content, reply_to=msg)


# ----------------------------------------------------------------------------- the server side
class ParallelEngine(FederatedEngine):
    """The in-process engine with up to ``parallel_clients`` clients of a round training at once (module docstring)."""

    def __init__(self, config: RunConfig, federation: Federation, out_dir: str | os.PathLike, *,
                 parallel_clients: int, progress: bool = True, log: Callable[[str], None] | None = None,
                 build: Callable[[RunConfig], Any] | None = None):
        super().__init__(config, federation, out_dir, progress=progress, log=log, build=build)
        check_parallel_clients(parallel_clients, self.clients_per_round())
        self.parallel_clients = parallel_clients
        #: CPU threads of every client: this process's torch thread count, as the sequential engine trains
        self.threads = torch.get_num_threads()
        self.grid: Grid | None = None
        self.shared_shapes = {k: tuple(v.shape) for k, v in self.policy.shared(self.init_state).items()}
        self.ledger = ledger_keys(config)

    def backend_config(self) -> dict[str, Any]:
        """Flower's Ray backend settings: each client's share of the devices; a local Ray sized for ``K`` clients."""
        gpus = 1 / self.parallel_clients if self.device.type == "cuda" else 0.0
        init: dict[str, Any] = {"logging_level": "error", "log_to_driver": False}
        if not os.environ.get("RAY_ADDRESS"):  # a local Ray; on a cluster its own resources decide
            init["num_cpus"] = self.parallel_clients * self.threads
            init["num_gpus"] = 1 if gpus else 0
        return {"client_resources": {"num_cpus": self.threads, "num_gpus": gpus}, "init_args": init}

    def run(self, *, resume: bool = False) -> dict[str, Any]:
        """The engine's run, as the ServerApp of a Flower simulation whose SuperNodes are the clients."""
        import ray
        from flwr.simulation import run_simulation

        os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
        result: dict[str, Any] = {}
        server_app = ServerApp()

        @server_app.main()
        def main(grid: Grid, context: Context) -> None:
            self.grid = grid
            try:
                result["summary"] = FederatedEngine.run(self, resume=resume)
            except BaseException as exc:  # raised again in the caller's thread, as the sequential engine raises it
                result["error"] = exc

        flwr_logger = logging.getLogger("flwr")
        level = flwr_logger.level
        flwr_logger.setLevel(logging.ERROR)  # Flower's per-message INFO lines and its deprecation notice
        started_ray = not ray.is_initialized()
        try:
            run_simulation(server_app=server_app, client_app=client_app, num_supernodes=len(self.clients),
                           backend_config=self.backend_config())
        finally:
            flwr_logger.setLevel(level)
            self.grid = None
            if started_ray and ray.is_initialized():
                ray.shutdown()
        if "error" in result:
            raise result["error"]
        if "summary" not in result:
            raise FlowerRunError("the Flower simulation stopped before the run finished")
        return result["summary"]

    def _message(self, node: int, client: ClientData, round_index: int) -> Message:
        """Client ``client``'s train message: what the server transmits, and the client's own state."""
        seed_everything(derive_seed(self.config.train.seed, "client", round_index, client.name))
        received = self.configure(client, round_index)
        run = run_record(self.config, "", round=round_index, threads=self.threads)
        run["client"] = client.name
        own = pack_client_state(self.client_states.get(client.name), self.client_memory.get(client.name, {}))
        content = RecordDict({RUN: run, GLOBAL: state_to_record(received), CLIENT_STATE: own})
        return Message(content, node, "train", group_id=str(round_index + 1))

    def _upload(self, client: ClientData, reply: Message) -> Upload:
        """Store the client's own state for it; the rest of the reply, through the privacy gate, as its upload."""
        if reply.has_error():
            raise FlowerRunError(f"client {client.name} failed: {reply.error.reason}")
        content = reply.content
        local, memory = unpack_client_state(content.config_records[CLIENT_STATE])
        self.client_states[client.name] = local
        self.client_memory[client.name] = memory
        if isinstance(self.client_memory, ClientMemories):  # written now, as the sequential engine does
            self.client_memory[client.name].spill(self.client_memory.round)
        del content[CLIENT_STATE]
        check_reply(reply, kind="train", shared_shapes=self.shared_shapes, model_keys=set(self.init_state),
                    ledger=self.ledger)
        ledger = content.array_records.get(LEDGER)
        return Upload(client.name, record_to_state(content.array_records[UPLOAD]), client.num_samples,
                      dict(content.metric_records[TRAIN]), reports=record_to_state(ledger) if ledger is not None else {})

    def collect_uploads(self, round_index: int, selected: list[ClientData], inbox: RoundInbox) -> None:
        """Keep up to ``K`` selected clients training; fold their uploads in selection order as they come in."""
        node_of = dict(zip((c.name for c in self.clients), sorted(self.grid.get_node_ids())))
        waiting = deque(enumerate(selected))
        in_flight: dict[str, int] = {}  # message id -> position in ``selected``
        arrived: dict[int, Message] = {}
        folded = 0
        while folded < len(selected):
            while waiting and len(in_flight) + len(arrived) < self.parallel_clients:
                i, client = waiting.popleft()
                message = self._message(node_of[client.name], client, round_index)
                in_flight.update(dict.fromkeys(self.grid.push_messages([message]), i))
            for reply in self.grid.pull_messages(list(in_flight)):
                arrived[in_flight.pop(reply.metadata.reply_to_message_id)] = reply
            if folded not in arrived:
                time.sleep(POLL_S)
                continue
            self.receive(inbox, self._upload(selected[folded], arrived.pop(folded)))
            self.heap.after_client()
            folded += 1
