"""Parallel clients: the in-process engine whose local training runs on Flower's simulation engine (Ray).

``privreid train --parallel-clients K`` runs :class:`ParallelEngine`, the
:class:`~privreid.federated.engine.FederatedEngine` with :meth:`ParallelEngine.collect_uploads` swapped: the
round's clients go to ``flwr.simulation.run_simulation`` (Ray), up to ``K`` training at once. Everything else
(selection, ``configure``, aggregation, defenses, privacy ledger, evaluation, ``ckpt.pt``, ``--resume``) is the
engine's own code in this process.

Workers: each Ray actor runs :data:`client_app`, builds the run's engine once (:func:`worker_engine`) and calls
:meth:`FederatedEngine.train_client`. Each client gets ``threads`` CPU threads and, on CUDA, ``1 / K`` of the
device. A local Ray is started with ``K * threads`` CPUs; on a cluster (``RAY_ADDRESS``,
docs/parallel-clients.md) its resources decide and ``K`` bounds the messages in flight.

Privacy boundary: a train reply carries the upload (what a Flower site sends) and the client's own state (local
keys, its memory file's name). The state goes straight to the client's store (the worker wrote the memory file
in ``client_memory/``; :class:`~privreid.federated.memory_store.ClientMemories` adopts it, so a memory never
crosses the wire); the rest passes :func:`~.messages.check_reply` before becoming the
:class:`~privreid.federated.strategy.Upload`. Workers must see the run directory at the same path.

Determinism: every client seeds from ``(seed, round, client)`` and uploads are folded in selection order, so
with the same threads per client the run equals the sequential engine's bit for bit
(``tests/test_parallel_clients.py``). Scheduling: on a Ray it started, the server keeps ``2K`` messages out
(``K`` waiting, so a worker need not wait for the fold and the simulation's 0.1 s poll); otherwise ``K``.
The server holds at most ``2K`` messages, replies and client states.
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

import numpy as np
import torch
from flwr.app import Array, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from privreid.checkpoint import Checkpoint
from privreid.config import RunConfig
from privreid.data.catalog import federation_for_config
from privreid.data.types import ClientData, Federation
from privreid.errors import ConfigError
from privreid.federated.engine import FederatedEngine, RoundInbox
from privreid.federated.memory_store import ClientMemories
from privreid.federated.strategy import Upload
from privreid.pickle_scan import safe_torch_load
from privreid.plugins import load_plugins
from privreid.seeding import derive_seed, seed_everything
from privreid.flower.messages import (GLOBAL, RUN, Converted, FlowerRunError, check_reply, content_upload, ledger_keys,
                                      parse_run_record, record_to_state, run_record, state_to_record, upload_content)
from privreid.composition import build_run

#: the record of a train message and its reply that holds the client's own state (local keys and memory)
CLIENT_STATE = "client-state"
#: how often the server polls the simulation for replies, in seconds.  With ``2K`` messages out no worker waits for
#: the poll (its next message is already queued), only the round's end does, by at most this; each poll costs the
#: server ~0.2 ms of CPU that the workers' cores lose (ResNet-18, 4 clients, K = 2: 5 ms polled ~900 times, ~160 ms
#: of CPU a round; 20 ms, ~35 ms)
POLL_S = 0.02
#: messages pushed and not yet folded per slot of a local Ray: one training, one queued (module docstring)
PUSHED_PER_WORKER = 2
#: how long the server waits for the simulation to register its SuperNodes, in seconds
NODES_TIMEOUT_S = 120.0
#: how long the server waits for a memory file a worker writes after its reply, in seconds
MEMORY_FILE_TIMEOUT_S = 120.0


def check_parallel_clients(parallel_clients: int, clients_per_round: int) -> None:
    """Refuse a ``--parallel-clients`` below 1 or above the number of clients a round trains."""
    if parallel_clients < 1:
        raise ConfigError(f"--parallel-clients must be >= 1 (got {parallel_clients})")
    if parallel_clients > clients_per_round:
        raise ConfigError(f"--parallel-clients {parallel_clients} exceeds the {clients_per_round} client(s) "
                          "trained per round")


# ----------------------------------------------------------------------------- the client's own state on the wire
def pack_client_state(local: dict | None, memory_file: str | None) -> ConfigRecord:
    """A client's local keys (``None`` before its first round; one ``torch.save`` blob) and its memory file's name."""
    buffer = io.BytesIO()
    torch.save(local, buffer)
    return ConfigRecord({"local": buffer.getvalue(), "memory-file": memory_file or ""})


def unpack_client_state(record: ConfigRecord) -> tuple[dict | None, str | None]:
    """The inverse of :func:`pack_client_state` (tensors and containers only: ``weights_only``)."""
    with tempfile.NamedTemporaryFile(suffix=".pt") as file:  # the one safe loader reads files (pickle_scan)
        file.write(bytes(record["local"]))
        file.flush()
        local = safe_torch_load(file.name, map_location="cpu")
    return local, str(record["memory-file"]) or None


# ----------------------------------------------------------------------------- arrays through Ray
def _array_fields(array: Array) -> tuple[str, tuple[int, ...], str, np.ndarray]:
    """A Flower ``Array``'s fields, its ``.npy`` bytes as a NumPy view: Ray moves those out of band, uncopied."""
    return array.dtype, array.shape, array.stype, np.frombuffer(array.data, np.uint8)


def _array_from_fields(fields: tuple[str, tuple[int, ...], str, np.ndarray]) -> Array:
    """The inverse of :func:`_array_fields` (the same bytes, copied out of Ray's object store)."""
    dtype, shape, stype, data = fields
    return Array(dtype=dtype, shape=shape, stype=stype, data=data.tobytes())


@functools.cache
def send_arrays_out_of_band() -> None:
    """Have this process's Ray move Flower ``Array`` bytes out of band (:func:`_array_fields`), as it moves
    NumPy buffers: a ResNet-18's 45 MiB went to an actor and back in 30-100 ms instead of 120-215. The message is
    the same; the server and every worker register it."""
    import ray

    ray.util.register_serializer(Array, serializer=_array_fields, deserializer=_array_from_fields)


# ----------------------------------------------------------------------------- the worker side
class WorkerEngine(FederatedEngine):
    """The run's engine in a Ray worker: trains the clients it is sent; writes only their memory files."""

    def __init__(self, config: RunConfig):
        super().__init__(config, federation_for_config(config), tempfile.gettempdir(), progress=False,
                         log=lambda msg: None, build=build_run)
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
    send_arrays_out_of_band()
    _, _, run = parse_run_record(msg.content)
    torch.set_num_threads(int(run["threads"]))
    engine = worker_engine(str(run["config"]))
    client = engine.by_name[str(run["client"])]
    local, memory_file = unpack_client_state(msg.content.config_records[CLIENT_STATE])
    round_index = int(run["round"])
    engine.client_states = {} if local is None else {client.name: local}
    engine.client_memory.wait()  # the last client's memory is on disk: a failed write fails this message
    # the client's memory as the sequential engine keeps it: read from its file when used, and written, if it
    # changed, to this round's file on the process's writing thread (the server waits for it: ParallelEngine)
    engine.client_memory = ClientMemories(Path(str(run["memory-dir"])), {client.name: memory_file})
    engine.client_memory.round = round_index + 1
    upload = engine.train_client(client, round_index, received=record_to_state(msg.content.array_records[GLOBAL]))
    memory_file = engine.client_memory.flush(wait=False)[client.name]
    own = pack_client_state(engine.client_states[client.name], memory_file)
    return Message(upload_content(upload, **{CLIENT_STATE: own}), reply_to=msg)


# ----------------------------------------------------------------------------- the server side
class ParallelEngine(FederatedEngine):
    """The in-process engine with up to ``parallel_clients`` clients of a round training at once (module docstring)."""

    def __init__(self, config: RunConfig, federation: Federation, out_dir: str | os.PathLike, *,
                 parallel_clients: int, progress: bool = True, log: Callable[[str], None] | None = None,
                 build: Callable[[RunConfig], Any]):
        super().__init__(config, federation, out_dir, progress=progress, log=log, build=build)
        check_parallel_clients(parallel_clients, self.clients_per_round())
        self.parallel_clients = parallel_clients
        #: messages pushed and not yet folded (module docstring, "Scheduling"); :meth:`run` lowers it to ``K`` on
        #: a Ray whose slots are not this engine's
        self.messages_out = PUSHED_PER_WORKER * parallel_clients
        #: CPU threads of every client: this process's torch thread count, as the sequential engine trains
        self.threads = torch.get_num_threads()
        self.grid: Grid | None = None
        #: the simulated SuperNode that trains each client (one per client), by client name
        self.node_of: dict[str, int] = {}
        self.shared_shapes = {k: tuple(v.shape) for k, v in self.policy.shared(self.init_state).items()}
        self.ledger = ledger_keys(config)
        #: this round's memory files that workers may still be writing (:meth:`await_memory_files`)
        self.memory_files_due: list[str] = []

    def backend_config(self) -> dict[str, Any]:
        """Flower's Ray backend settings: a local Ray sized for ``K`` clients; on CUDA ``min(1, GPUs / K)``
        of the GPUs per client (Ray sets each worker's ``CUDA_VISIBLE_DEVICES``)."""
        devices = torch.cuda.device_count() if self.device.type == "cuda" else 0
        gpus = min(1.0, devices / self.parallel_clients)
        init: dict[str, Any] = {"logging_level": "error", "log_to_driver": False}
        if not os.environ.get("RAY_ADDRESS"):  # a local Ray; on a cluster its own resources decide
            init["num_cpus"] = self.parallel_clients * self.threads
            init["num_gpus"] = devices
        return {"client_resources": {"num_cpus": self.threads, "num_gpus": gpus}, "init_args": init}

    def run(self, *, resume: bool | Checkpoint = False) -> dict[str, Any]:
        """The engine's run, as the ServerApp of a Flower simulation whose SuperNodes are the clients."""
        import ray
        from flwr.simulation import run_simulation

        os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
        # Ray's future default (it warns otherwise); workers asking for no GPU train on the CPU anyway
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        result: dict[str, Any] = {}
        server_app = ServerApp()

        @server_app.main()
        def main(grid: Grid, context: Context) -> None:
            try:
                self.attach(grid)
                result["summary"] = FederatedEngine.run(self, resume=resume)
            except BaseException as exc:  # raised again in the caller's thread, as the sequential engine raises it
                result["error"] = exc

        flwr_logger = logging.getLogger("flwr")
        level = flwr_logger.level
        flwr_logger.setLevel(logging.ERROR)  # Flower's per-message INFO lines and its deprecation notice
        started_ray = not ray.is_initialized()
        if not started_ray or os.environ.get("RAY_ADDRESS"):
            self.messages_out = self.parallel_clients
        send_arrays_out_of_band()
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

    def attach(self, grid: Grid) -> None:
        """Train on ``grid``'s SuperNodes, one per client, once all of them have registered."""
        deadline = time.monotonic() + NODES_TIMEOUT_S
        while len(nodes := sorted(grid.get_node_ids())) < len(self.clients):
            if time.monotonic() > deadline:
                raise FlowerRunError(f"only {len(nodes)} of {len(self.clients)} simulated clients started within "
                                     f"{NODES_TIMEOUT_S:g} s")
            time.sleep(POLL_S)
        self.grid = grid
        self.node_of = dict(zip((c.name for c in self.clients), nodes))

    def _message(self, node: int, client: ClientData, round_index: int, converted: Converted) -> Message:
        """Client ``client``'s train message: what the server transmits (tensors the round's earlier messages
        sent unchanged reuse their Arrays from ``converted``), and the client's own state."""
        seed_everything(derive_seed(self.config.runtime.seed, "client", round_index, client.name))
        received = self.configure(client, round_index)
        run = run_record(self.config, "", round=round_index, threads=self.threads)
        run["client"] = client.name
        run["memory-dir"] = str(self.client_memory.directory.resolve())
        own = pack_client_state(self.client_states.get(client.name), self.client_memory.file_of(client.name))
        content = RecordDict({RUN: run, GLOBAL: state_to_record(received, converted), CLIENT_STATE: own})
        return Message(content, node, "train", group_id=str(round_index + 1))

    def _upload(self, client: ClientData, reply: Message) -> Upload:
        """Store the client's own state for it; the rest of the reply, through the privacy gate, as its upload."""
        if reply.has_error():
            raise FlowerRunError(f"client {client.name} failed: {reply.error.reason}")
        content = reply.content
        local, memory_file = unpack_client_state(content.config_records[CLIENT_STATE])
        self.client_states[client.name] = local
        self.client_memory.adopt(client.name, memory_file)
        if memory_file:
            self.memory_files_due.append(memory_file)
        del content[CLIENT_STATE]
        check_reply(reply, kind="train", shared_shapes=self.shared_shapes, model_keys=set(self.init_state),
                    ledger=self.ledger)
        return content_upload(client.name, content, client.num_samples)

    def await_memory_files(self) -> None:
        """Block until every memory file adopted this round is on disk (a worker writes it after its reply, to a
        temporary sibling renamed when whole). :class:`FlowerRunError` if one is missing after
        :data:`MEMORY_FILE_TIMEOUT_S` (its worker failed or stopped)."""
        deadline = time.monotonic() + MEMORY_FILE_TIMEOUT_S
        while self.memory_files_due:
            if (self.client_memory.directory / self.memory_files_due[-1]).exists():
                self.memory_files_due.pop()
            elif time.monotonic() > deadline:
                raise FlowerRunError(f"client memory file {self.memory_files_due[-1]} was not written within "
                                     f"{MEMORY_FILE_TIMEOUT_S:g} s of its client's reply")
            else:
                time.sleep(POLL_S)

    def finish_round(self, round_index: int, inbox: RoundInbox, down_bytes: int) -> None:
        """The engine's part of the round (evaluation reads client memories, the checkpoint names their files),
        once the round's memory files are on disk."""
        self.await_memory_files()
        super().finish_round(round_index, inbox, down_bytes)

    def collect_uploads(self, round_index: int, selected: list[ClientData], inbox: RoundInbox) -> None:
        """Keep up to :attr:`messages_out` selected clients' messages out (``K`` training, the rest queued); fold
        their uploads in selection order as they come in.  The global state's tensors are converted once a round
        (``converted``; :func:`~.messages.state_to_record`)."""
        waiting = deque(enumerate(selected))
        converted: Converted = {}
        in_flight: dict[str, int] = {}  # message id -> position in ``selected``
        arrived: dict[int, Message] = {}
        folded = 0
        while folded < len(selected):
            if self.grid is None:  # :meth:`run` returned (a signal stopped the simulation): stop this thread too
                raise FlowerRunError(f"round {round_index + 1} stopped with the simulation")
            while waiting and len(in_flight) + len(arrived) < self.messages_out:
                i, client = waiting.popleft()
                message = self._message(self.node_of[client.name], client, round_index, converted)
                in_flight.update(dict.fromkeys(self.grid.push_messages([message]), i))
            for reply in self.grid.pull_messages(list(in_flight)):
                arrived[in_flight.pop(reply.metadata.reply_to_message_id)] = reply
            if folded not in arrived:
                time.sleep(POLL_S)
                continue
            self.receive(inbox, self._upload(selected[folded], arrived.pop(folded)))
            self.heap.after_client()
            folded += 1
