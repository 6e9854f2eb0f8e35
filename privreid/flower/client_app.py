"""The privreid ClientApp: one site's part of every round, by the engine's own client code.

Flower runs this in the site's SuperNode (flwr 1.41 Message API). Each handler rebuilds the run's engine for the
site's one client (:class:`SiteEngine`) and calls the in-process engine's functions, never re-implementing them:
``query`` describes the site (what leaves: :mod:`.messages`); ``train`` runs
:meth:`FederatedEngine.train_client` on what the server's ``configure`` sent (the client-side start, FedReID's
half-average and Eq. 15 noise run here) and replies with the upload, scalar metrics and, under DP-SGD, the
accountant's parameters; ``evaluate`` runs :meth:`FederatedEngine._eval_global` and
:meth:`FederatedEngine._eval_local` on the site's seen split (metrics only). The site loads its own plugins
first (:func:`load_site_plugins`); local state and memory live in :class:`~.site.SiteState`, not Flower's
``context.state``, which can lag one message behind (:mod:`.site`).
"""

from __future__ import annotations

from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from privreid.config import RunConfig
from privreid.federated.engine import FederatedEngine
from privreid.plugins import load_plugins
from privreid.precision import cuda_speedups
from privreid.flower.messages import (GLOBAL, RUN, SITE, SITE_SIZE, eval_records, parse_run_record, record_to_state,
                                      scalar_metrics, upload_content)
from privreid.flower.site import Site, SiteState
from privreid.defenses.secure_aggregation.flower import fit_message_content, is_secure, secure_aggregation_mod, secure_fit_reply
from privreid.composition import build_run


def load_site_plugins(msg: Message, context: Context, call_next) -> Message:
    """Load the plugins this site's operator installed or named (``privreid --plugin M flower supernode``, which
    exports $PRIVREID_PLUGINS); never those the server names: a server cannot make a site import code."""
    load_plugins()
    return call_next(msg, context)


app = ClientApp(mods=[load_site_plugins, secure_aggregation_mod])  # SecAgg+ stages go through Flower's secaggplus_mod


class SiteEngine(FederatedEngine):
    """The engine on one site: its one client; metric records are collected for the reply, not written."""

    client_memory_on_disk = False  # the site keeps its one client's state in its own store (SiteState)

    def __init__(self, config: RunConfig, site: Site):
        super().__init__(config, site.federation, site.state_dir, progress=False, log=lambda msg: None,
                         build=build_run)
        self.records: list[dict[str, Any]] = []

    def _record(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)

    def clients_per_round(self) -> int:
        """One client here; under secure aggregation the server, which selects the round, checks its size."""
        n = super().clients_per_round()
        return max(n, 2) if self.config.privacy.secure_aggregation else n


def _size_record(site: Site):
    return scalar_metrics({"num_samples": site.client.num_samples, "num_classes": site.client.num_classes})


@app.query()
def describe(msg: Message, context: Context) -> Message:
    """The site's names and sizes (the server builds its client list from them)."""
    parse_run_record(msg.content)  # a site refuses a configuration it cannot read
    site = Site.from_node_config(context.node_config)
    client = site.client
    return Message(RecordDict({
        SITE: ConfigRecord({"name": client.name, "domain": client.domain,
                            "source_pids": list(client.source_pids or [])}),
        SITE_SIZE: _size_record(site),
    }), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One round of local training on the site's data; the upload and scalar metrics. Under SecAgg+ the reply is
    the ``FitRes`` Flower's mod masks (:func:`~privreid.defenses.secure_aggregation.flower.secure_fit_reply`;
    the ledger's reports as its scalar metrics)."""
    secure = is_secure(msg)
    if secure:
        fields, received = fit_message_content(msg.content)
        run_fields = {k: v for k, v in fields.items() if not str(k).startswith("secagg-")}
        config, run_key, run = parse_run_record(RecordDict({RUN: ConfigRecord(run_fields)}))
    else:
        config, run_key, run = parse_run_record(msg.content)
    round_index = int(run["round"])
    site = Site.from_node_config(context.node_config)
    client = site.client
    engine = SiteEngine(config, site)
    store = SiteState(site, run_key)
    restored = store.load(round_index)
    if restored is not None:
        engine.client_states[client.name], engine.client_memory[client.name] = restored
    engine.client_memory.setdefault(client.name, {})

    with cuda_speedups(engine.device, config.runtime.cudnn_benchmark):  # as the in-process engine's rounds
        if secure:
            reply = secure_fit_reply(engine, client, round_index, fields, received)
        else:
            upload = engine.train_client(client, round_index,
                                         received=record_to_state(msg.content.array_records[GLOBAL]))
            reply = upload_content(upload, **{SITE_SIZE: _size_record(site)})
    store.save(round_index + 1, engine.client_states[client.name], engine.client_memory[client.name])
    return Message(reply, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The aggregated global model and the client's personalised model on the site's seen-domain split."""
    config, run_key, run = parse_run_record(msg.content)
    round_no = int(run["round"])
    site = Site.from_node_config(context.node_config)
    client = site.client
    engine = SiteEngine(config, site)
    engine.global_state = record_to_state(msg.content.array_records[GLOBAL])
    engine._eval_global(round_no)
    restored = SiteState(site, run_key).load(round_no)  # the state after its latest training
    if restored is not None:
        engine.client_states[client.name], engine.client_memory[client.name] = restored
    global_records = list(engine.records)
    engine.records.clear()
    engine._eval_local(round_no, client)
    return Message(RecordDict({**eval_records("global", global_records), **eval_records("local", engine.records)}),
                   reply_to=msg)
