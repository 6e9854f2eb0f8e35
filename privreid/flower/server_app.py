"""The privreid ServerApp: the engine's rounds, with the clients' part done by Flower sites.

:class:`FlowerServerEngine` is the in-process :class:`FederatedEngine` with :meth:`collect_uploads` swapped: the
round goes to the selected SuperNodes through Flower's ``Grid``. Selection, ``configure``, aggregation,
communication counting, ``ckpt.pt``, ``metrics.jsonl``, ``summary.json`` and ``--resume`` are the engine's code.
Where a real federation differs from one process:

* **Sites.** Each SuperNode is one client; the clients are the sites that answered ``query``, sorted by name (the
  in-process order for the synthetic federation and name-ordered ``--data``). A site's name, domain and sizes
  are all the server knows (:class:`RemoteClient`).
* **Download.** Each site gets exactly what ``configure`` returns for its client; the method's client start and
  ``--beta-mode download`` noise (paper 002 Eq. 15) run on the site in the client's seeded stream.
* **Evaluation.** Seen domains: each site evaluates the global and its personalised model on its test split
  (``evaluate``; metrics only). Unseen: the coordinator, if it has their data (``server_eval``). Records come in
  the in-process order.
* **Faults.** A site that does not reply (killed, past ``round_timeout``) or errs is dropped from the round; the
  round aggregates if ``min_clients`` uploads arrived (0: all), else :class:`FlowerRunError`. The last
  checkpoint stays valid for ``--resume``.
* **Privacy.** Every reply passes :func:`~.messages.check_reply`. Client-level DP and upload-side beta noise run
  here as strategy wrappers; DP-SGD runs on the sites, which report the accountant's parameters
  (``Upload.reports``; under ``--secure-aggregation`` as ``FitRes`` metrics,
  :mod:`privreid.defenses.secure_aggregation.flower`), so the ledger enforces ``--target-epsilon`` here.

Methods that cannot run on Flower are refused by :func:`check_flower_support` with the reason.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from privreid.config import RunConfig
from privreid.data.catalog import federation_for_config
from privreid.data.types import ClientData, Federation, TestSet
from privreid.errors import ConfigError, PrivreidError
from privreid.evaluation.metric_registry import metric_line
from privreid.composition import build_method, build_run
from privreid.federated.engine import FederatedEngine, RoundInbox
from privreid.federated.policy import StateDict, state_nbytes
from privreid.plugins import load_plugins, named_plugins
from privreid.io import write_json_atomic
from privreid.seeding import derive_seed, seed_everything
from privreid.flower.messages import (GLOBAL, RUN, SITE, SITE_SIZE, FlowerRunError, check_reply, content_upload,
                                      ledger_keys, parse_eval_records, run_record, state_to_record)

#: written next to ckpt.pt: the run key the sites file their local state under, and the client list
RUN_INFO = "flower.json"


# ----------------------------------------------------------------------------- which methods can run
def check_flower_support(config: RunConfig) -> None:
    """Raise :class:`ConfigError` saying why if the configured method cannot run on Flower."""
    method = build_method(config)
    why = None
    if method.prepare_clients_for(config) is not None:
        why = "it reshapes the clients' data before training (centralized pools every client's images; dppt's " \
              "shared classifier relabels them with the federation's global identities: --opt " \
              "shared_classifier=false runs), which needs all the data in one place"
    elif config.privacy.secure_aggregation and method.exchanges_extras_for(config):
        why = "under --secure-aggregation: its clients and server also exchange tensors beyond the model (dppt's class centres: --opt " \
              "mrb=false exchanges none), and Flower's SecAgg+ carries model updates only; run it in-process " \
              "(`privreid train --secure-aggregation`)"
    elif not method.communicates:
        why = "its clients never communicate, so there is nothing to federate; train it with `privreid train`"
    elif method.global_eval_state is not None:
        with torch.random.fork_rng(devices=[]):
            model = method.build_model(config, initial_weights=False)
        state = model.state_dict()
        try:
            evaluated = method.global_eval_state(method.policy_for(config).shared(state), {})
            missing, detail = [k for k in state if k not in evaluated], ""
        except (ValueError, KeyError, RuntimeError) as exc:
            missing, detail = [], str(exc)
        if missing or detail:
            why = (f"its global model needs the clients' local layers, which never leave a Flower site "
                   f"({detail or ', '.join(missing[:3]) + ' would be missing'})")
    if why:
        raise ConfigError(f"method {method.name!r} cannot run on Flower: {why}")


# ----------------------------------------------------------------------------- settings
@dataclass
class ServerSettings:
    """What ``privreid flower run`` passes to the ServerApp (Flower's run config)."""

    config: RunConfig
    out_dir: Path
    sites: int = 2
    min_clients: int = 0
    round_timeout: float = 0.0
    wait_timeout: float = 300.0
    server_eval: bool = True
    resume: bool = False
    poll: float = 0.2

    def to_run_config(self) -> dict[str, Any]:
        return {"privreid-config": json.dumps(self.config.to_dict(), sort_keys=True),
                "out-dir": str(self.out_dir), "sites": self.sites, "min-clients": self.min_clients,
                "round-timeout": float(self.round_timeout), "wait-timeout": float(self.wait_timeout),
                "server-eval": self.server_eval, "resume": self.resume, "poll": float(self.poll),
                "plugins": ",".join(named_plugins())}  # the submitter's --plugin, loaded by the ServerApp

    @classmethod
    def from_run_config(cls, rc: dict[str, Any]) -> ServerSettings:
        try:
            return cls(config=RunConfig.from_dict(json.loads(str(rc["privreid-config"]))).validate(),
                       out_dir=Path(str(rc["out-dir"])), sites=int(rc["sites"]), min_clients=int(rc["min-clients"]),
                       round_timeout=float(rc["round-timeout"]), wait_timeout=float(rc["wait-timeout"]),
                       server_eval=bool(rc["server-eval"]), resume=bool(rc["resume"]), poll=float(rc["poll"]))
        except KeyError as exc:
            raise ConfigError(f"the Flower run config lacks {exc}; submit runs with `privreid flower run`") from None

    def validate(self) -> ServerSettings:
        if self.sites < 1:
            raise ConfigError(f"--sites must be >= 1 (got {self.sites})")
        if self.min_clients < 0:
            raise ConfigError(f"--min-clients must be >= 0 (got {self.min_clients})")
        if self.round_timeout < 0 or self.wait_timeout <= 0:
            raise ConfigError("--round-timeout must be >= 0 and --wait-timeout > 0")
        return self


# ----------------------------------------------------------------------------- the server's view of a site
@dataclass
class RemoteClient(ClientData):
    """A site as the server knows it: names, sizes, identity numbers, node id; no samples."""

    node_id: int = 0
    remote_samples: int = 0
    remote_classes: int = 0

    @property
    def num_samples(self) -> int:
        return self.remote_samples

    @property
    def num_classes(self) -> int:
        return self.remote_classes


@dataclass
class SiteReply:
    client: RemoteClient
    content: RecordDict | None
    failure: str = ""


@dataclass
class SiteLink:
    """Message exchange with the sites through Flower's Grid; every reply goes through the privacy gate."""

    grid: Grid
    settings: ServerSettings
    run_key: str
    shared_shapes: dict[str, tuple[int, ...]]
    model_keys: set[str]
    log: Callable[[str], None] = print
    #: bytes of global state sent in ``evaluate`` messages, per round
    eval_bytes: dict[int, int] = field(default_factory=dict)

    def _run(self, **fields) -> ConfigRecord:
        return run_record(self.settings.config, self.run_key, **fields)

    def exchange(self, messages: list[Message], timeout: float | None) -> dict[int, Message]:
        """Push ``messages`` and pull replies until all arrived or ``timeout`` s passed; replies by node id."""
        ids = list(self.grid.push_messages(messages))
        node_of = {mid: m.metadata.dst_node_id for mid, m in zip(ids, messages) if mid}
        pending, replies = set(node_of), {}
        deadline = None if not timeout else time.monotonic() + timeout
        while pending and (deadline is None or time.monotonic() < deadline):
            for reply in self.grid.pull_messages(list(pending)):
                mid = reply.metadata.reply_to_message_id
                if mid in pending:
                    pending.discard(mid)
                    replies[node_of[mid]] = reply
            if pending:
                time.sleep(self.settings.poll)
        return replies

    def _collect(self, clients: list[RemoteClient], messages: list[Message], kind: str,
                 timeout: float | None) -> list[SiteReply]:
        replies = self.exchange(messages, timeout)
        out = []
        for client in clients:
            reply = replies.get(client.node_id)
            if reply is None:
                out.append(SiteReply(client, None, "no reply" + (f" within {timeout:g} s" if timeout else "")))
            elif reply.has_error():
                out.append(SiteReply(client, None, reply.error.reason))
            else:
                check_reply(reply, kind=kind, shared_shapes=self.shared_shapes, model_keys=self.model_keys,
                            ledger=ledger_keys(self.settings.config))
                out.append(SiteReply(client, reply.content))
        return out

    # -- the three exchanges ---------------------------------------------------
    def discover(self, names: list[str] | None) -> list[RemoteClient]:
        """Wait for the SuperNodes and ask each to describe its site; the clients sorted by name. ``names`` (on
        ``--resume``): wait for those (up to ``wait_timeout``), a missing one failing every round that selects
        it; otherwise wait for ``sites`` SuperNodes."""
        want = len(names) if names else self.settings.sites
        deadline = time.monotonic() + self.settings.wait_timeout
        described: dict[str, RemoteClient] = {}
        asked: set[int] = set()
        failures: list[str] = []
        while True:
            nodes = sorted(set(self.grid.get_node_ids()) - asked)
            asked.update(nodes)
            stubs = [RemoteClient(name=str(n), domain="", train=[], node_id=n) for n in nodes]
            messages = [Message(RecordDict({RUN: self._run()}), n, "query") for n in nodes]
            for rep in self._collect(stubs, messages, "query", self.settings.wait_timeout) if nodes else []:
                if rep.content is None:
                    failures.append(f"SuperNode {rep.client.node_id}: {rep.failure}")
                    self.log(f"SuperNode {rep.client.node_id} did not describe its site: {rep.failure}")
                    continue
                client = _remote_client(rep.client.node_id, rep.content)
                if client.name in described:
                    raise FlowerRunError(f"two SuperNodes serve a site named {client.name!r}; give each "
                                         "`privreid flower supernode` a distinct --name")
                described[client.name] = client
            have = set(described) & set(names) if names else set(described)
            if len(have) >= want or time.monotonic() > deadline:
                break
            time.sleep(self.settings.poll)
        if names:
            missing = sorted(set(names) - set(described))
            if missing:
                self.log(f"sites not connected: {', '.join(missing)}; rounds that select them lose their upload")
            return [described.get(n) or RemoteClient(name=n, domain="", train=[], node_id=-1) for n in names]
        if len(described) < want:
            raise FlowerRunError(f"only {len(described)} of {want} sites connected within "
                                 f"{self.settings.wait_timeout:g} s ({', '.join(sorted(described)) or 'none'})"
                                 + (f"; {'; '.join(failures)}" if failures else ""))
        return sorted(described.values(), key=lambda c: c.name)

    def train(self, round_index: int, transmissions: list[tuple[RemoteClient, StateDict]]) -> list[SiteReply]:
        messages = [Message(RecordDict({RUN: self._run(round=round_index), GLOBAL: state_to_record(received)}),
                            client.node_id, "train", group_id=str(round_index + 1))
                    for client, received in transmissions]
        return self._dispatch([client for client, _ in transmissions], messages, "train")

    def evaluate(self, round_no: int, global_state: StateDict, clients: list[RemoteClient]) -> list[SiteReply]:
        live = [c for c in clients if c.node_id >= 0]
        messages = [Message(RecordDict({RUN: self._run(round=round_no), GLOBAL: state_to_record(global_state)}),
                            c.node_id, "evaluate", group_id=str(round_no)) for c in live]
        self.eval_bytes[round_no] = state_nbytes(global_state) * len(live)
        return self._dispatch(live, messages, "evaluate")

    def _dispatch(self, clients, messages, kind) -> list[SiteReply]:
        dead = [c for c in clients if c.node_id < 0]
        live = [(c, m) for c, m in zip(clients, messages) if c.node_id >= 0]
        replies = self._collect([c for c, _ in live], [m for _, m in live], kind,
                                self.settings.round_timeout or None) if live else []
        by_name = {r.client.name: r for r in replies}
        by_name.update({c.name: SiteReply(c, None, "site not connected") for c in dead})
        return [by_name[c.name] for c in clients]


def _remote_client(node_id: int, content: RecordDict) -> RemoteClient:
    site, size = content.config_records[SITE], content.metric_records[SITE_SIZE]
    return RemoteClient(name=str(site["name"]), domain=str(site["domain"]), train=[],
                        source_pids=[int(p) for p in site.get("source_pids", [])] or None, node_id=node_id,
                        remote_samples=int(size["num_samples"]), remote_classes=int(size["num_classes"]))


# ----------------------------------------------------------------------------- the engine
class FlowerServerEngine(FederatedEngine):
    """The engine whose clients are Flower sites (see the module docstring)."""

    holds_client_states = False
    client_memory_on_disk = False

    def __init__(self, config: RunConfig, federation: Federation, out_dir: str | Path, link: SiteLink, *,
                 min_clients: int = 0, log: Callable[[str], None] = print):
        super().__init__(config, federation, out_dir, progress=False, log=log, build=build_run)
        self.link = link
        self.min_clients = min_clients

    def transmission(self, client: RemoteClient, round_index: int) -> StateDict:
        """What the server sends ``client`` this round: exactly the strategy's ``configure``."""
        seed_everything(derive_seed(self.config.runtime.seed, "download", round_index, client.name))
        return self.configure(client, round_index)

    def collect_uploads(self, round_index: int, selected: list[ClientData], inbox: RoundInbox) -> None:
        """The round on the selected sites; each reply becomes an upload handed to :meth:`receive`, then dropped."""
        if self.config.privacy.secure_aggregation:  # Flower's SecAgg+ workflow; the sites' mod masks
            from privreid.defenses.secure_aggregation.flower import collect_secure

            for upload in collect_secure(self, round_index, selected):  # one AggregatedUpload
                inbox.add(upload)
            return
        round_no = round_index + 1
        replies = self.link.train(round_index, [(c, self.transmission(c, round_index)) for c in selected])
        failures = []
        for i, rep in enumerate(replies):
            replies[i] = None  # the reply's arrays are folded and released one site at a time
            if rep.content is None:
                failures.append(f"{rep.client.name} ({rep.failure})")
                continue
            num_samples = int(rep.content.metric_records[SITE_SIZE]["num_samples"])
            self.receive(inbox, content_upload(rep.client.name, rep.content, num_samples))
        needed = self.min_clients or len(selected)
        if failures:
            self.log(f"round {round_no}: no upload from {', '.join(failures)}")
        if inbox.received < needed:
            raise FlowerRunError(
                f"round {round_no}: {inbox.received} of {len(selected)} selected sites uploaded, "
                f"{needed} needed (--min-clients {self.min_clients}); failed: {', '.join(failures)}. "
                f"{self.out_dir / 'ckpt.pt'} holds round {round_index}; restart the sites and pass --resume")

    def evaluate_round(self, round_no: int) -> None:
        """Seen domains on the sites (global and personalised), unseen domains here; in the in-process order."""
        shared = {k: v for k, v in self.global_state.items() if k in self.init_state}
        replies = [r for r in self.link.evaluate(round_no, shared, self.clients)]
        for rep in replies:
            if rep.content is None:
                self.log(f"round {round_no}: {rep.client.name} did not evaluate ({rep.failure})")
                continue
            for split, testset, res in parse_eval_records(rep.content, "global"):
                self._record({"round": round_no, "scope": "global", "split": split, "testset": testset, **res})
                self.log(f"round {round_no} global {split:6s} {testset:12s} "
                         + metric_line(res))
        if self.federation.unseen:
            self._load_global()
            for ts in self.federation.unseen:
                res = self._eval(ts)
                self._record({"round": round_no, "scope": "global", "split": "unseen", "testset": ts.name, **res})
                self.log(f"round {round_no} global unseen {ts.name:12s} "
                         + metric_line(res))
        for rep in replies:
            for split, testset, res in parse_eval_records(rep.content, "local") if rep.content is not None else []:
                self._record({"round": round_no, "scope": "local", "client": rep.client.name, "split": split,
                              "testset": testset, **res})
        if self.comm and self.comm[-1]["round"] == round_no:
            self.comm[-1]["bytes_down_eval"] = self.link.eval_bytes.get(round_no, 0)

    def _global_eval_extra(self) -> StateDict:
        """The keys the global model takes from the method's ``global_eval_state`` (computed without local states)."""
        if not self.method.global_eval_state:
            return {}
        state = self.method.global_eval_state(self.global_state, {})
        return {k: v for k, v in state.items() if k not in self.global_state}

    def summary(self, wall_time: float) -> dict[str, Any]:
        out = super().summary(wall_time)
        out["runtime"] = "flower"
        out["comm_bytes_down_eval"] = sum(c.get("bytes_down_eval", 0) for c in self.comm)
        return out


# ----------------------------------------------------------------------------- the run
def run_server(grid: Grid, settings: ServerSettings, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """One privreid run on the sites behind ``grid``; writes ckpt.pt, metrics.jsonl, summary.json, flower.json."""
    settings.validate()
    config = settings.config
    check_flower_support(config)
    out = settings.out_dir
    info_path = out / RUN_INFO
    if settings.resume:
        if not (out / "ckpt.pt").is_file() or not info_path.is_file():
            raise ConfigError(f"--resume: {out} holds no Flower run (ckpt.pt and {RUN_INFO})")
        info = json.loads(info_path.read_text())
        run_key, names = info["run_key"], info["clients"]
    else:
        run_key, names = uuid.uuid4().hex, None

    link = SiteLink(grid, settings, run_key, shared_shapes={}, model_keys=set(), log=log)
    clients = link.discover(names)
    log(f"{config.federation.method}: {len(clients)} site(s) [{', '.join(c.name for c in clients)}]")

    unseen: list[TestSet] = []
    if settings.server_eval:
        try:
            unseen = federation_for_config(config).unseen
        except PrivreidError as exc:
            raise ConfigError(f"the coordinator cannot load the run's held-out test data ({exc}); "
                              "give it the data or pass --no-server-eval") from exc
    federation = Federation(protocol="by-dataset", clients=clients, seen=[], unseen=unseen)
    engine = FlowerServerEngine(config, federation, out, link, min_clients=settings.min_clients, log=log)
    link.shared_shapes = {k: tuple(v.shape) for k, v in engine.policy.shared(engine.init_state).items()}
    link.model_keys = set(engine.init_state)
    per_round = len(engine.select_clients(0))
    if settings.min_clients > per_round:
        raise ConfigError(f"--min-clients {settings.min_clients} exceeds the {per_round} site(s) selected per round")
    if not settings.resume:
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(info_path, {"run_key": run_key, "clients": [c.name for c in clients]})
    return engine.run(resume=settings.resume)


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower entry point: settings from the run config (``privreid flower run`` writes them), after the plugins
    installed here, named here ($PRIVREID_PLUGINS) and named by the submitter (``privreid --plugin M flower run``)."""
    load_plugins(named_plugins(str(context.run_config.get("plugins", ""))))
    run_server(grid, ServerSettings.from_run_config(dict(context.run_config)))
