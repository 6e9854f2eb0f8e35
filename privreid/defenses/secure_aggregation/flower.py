"""Secure aggregation on privreid's Flower runtime: Flower's own ``secaggplus_mod`` and ``SecAggPlusWorkflow``.

flwr 1.41's SecAgg+ is written for the legacy path: the workflow drives a ``flwr.server.strategy.Strategy`` through
a ``LegacyContext``, and the client mod wraps a ClientApp whose train handler speaks ``FitIns`` / ``FitRes``.
privreid's runtime uses the Message API, so this module adapts, one round at a time, without re-implementing any of
the protocol:

* server (:func:`secure_round`): a one-round legacy strategy (:class:`_RoundStrategy`) hands the workflow the round's
  selected sites and what each receives (``FitIns``: the download's tensors, the run record and the key order); the
  workflow runs setup, share keys, collect masked vectors and unmask through the Grid, every reply checked by
  :func:`check_secure_reply`, and returns the dequantised weighted mean of the sites' vectors, which
  :class:`~privreid.defenses.secure_aggregation.mechanism.AggregatedUpload` carries to the method's strategy.  Sites
  that drop out after sharing their keys are recovered by the protocol (their masks removed with the survivors'
  shares); fewer survivors than the threshold abort the round.
* site (:func:`secure_aggregation_mod`, :func:`secure_fit_reply`): train messages that carry SecAgg+ stages go
  through Flower's ``secaggplus_mod``; at the collect stage the site trains with the engine's own code and returns,
  as ``FitRes``, the vector :meth:`~privreid.defenses.secure_aggregation.mechanism.SecureAggregate.client_input`
  builds (its update, clipped and noised under distributed DP) with its weight as ``num_examples``; the mod
  pre-scales, quantises and masks it and drops the tensors before the reply leaves.

Same model as in-process: a round's protocol seed is the one the in-process
:class:`~privreid.defenses.secure_aggregation.mechanism.SecureAggregate` draws (:func:`round_seed`), so the
distributed-DP noise shares are the same; each site seeds numpy's global generator, which Flower's ``quantize`` draws
its stochastic rounding from, with :func:`~privreid.defenses.secure_aggregation.protocol.rounding_seed` after
training and before the mod quantises (the mod restores it afterwards), so every value is rounded as in-process; the
masked sums are exact integers modulo ``2**32`` and the dequantisation is the same float64 arithmetic, so both
runtimes give bit-identical global models, provided the sites train with the in-process run's number of torch
threads (another count changes the updates' last bits, and the few values at a quantum's boundary round the other
way: still within the quantisation bound).

Privacy ledger: the ``FitRes`` metrics also carry the client update's reports for the server's ledger
(``Upload.reports``: DP-SGD's accountant history and noise multiplier; no data), as scalars under the reserved prefix
:data:`REPORT_PREFIX` (:func:`reports_to_metrics`); the server rebuilds them (:func:`split_reports`) and hands each
survivor's to the engine's round observers, as in-process and on Flower's plain path, so epsilon is logged, and
``--target-epsilon`` enforced, as in-process.

What the server sees beyond the in-process run: ``FitRes`` carries ``num_examples`` (the client's weight: its sample
count, public in privreid's threat model, or 1), the scalar training metrics and those reports in the clear.  Extra
upload tensors (DPPT's class centres) have no place in Flower's vector and are refused.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, FitIns, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.constant import ErrorCode
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, RECORD_KEY_STATE, Key, Stage
from flwr.common.serde import config_record_from_proto, config_record_to_proto
from flwr.proto.recorddict_pb2 import ConfigRecord as ProtoConfigRecord
from flwr.compat.common import recorddict_compat as compat
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy as LegacyStrategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD

from privreid.federated.policy import StateDict
from privreid.io import write_file_atomically
from privreid.defenses.secure_aggregation.protocol import rounding_seed

#: FitIns config keys privreid adds (everything else in it is the run record)
KEYS, CLIENTS, SEED, SCALE, CLIP = "secagg-keys", "secagg-clients", "secagg-seed", "secagg-scale", "secagg-clip"
#: what a site's reply may hold in each SecAgg+ stage
ALLOWED_CONFIGS = {RECORD_KEY_CONFIGS, "fitres.metrics", "fitres.status"}
#: metric-key prefix of the ledger reports in a ``FitRes`` (:func:`reports_to_metrics`)
REPORT_PREFIX = "privacy-ledger:"
#: the dtypes a report may have (its code in the metrics is the index)
REPORT_DTYPES = (torch.float64, torch.float32, torch.int64)


def is_secure(msg: Message) -> bool:
    return msg.metadata.message_type == MessageType.TRAIN and RECORD_KEY_CONFIGS in msg.content.config_records


def secure_aggregation_mod(msg: Message, ctxt: Context, call_next) -> Message:
    """Flower's ``secaggplus_mod`` for train messages that carry SecAgg+ stages; every other message passes.

    numpy's global generator comes back as it was: :func:`secure_fit_reply` seeds it for the mod's stochastic rounding.

    The mod keeps the protocol's state (keys, shares received, stage reached) in ``ctxt.state``, which the SuperNode
    stores only when the ``flwr-clientapp`` process's last request (flwr 1.41's ``PushTaskOutput``: one try, after
    the reply has left) gets through; on a loaded machine it can time out while the SuperNode forwards a large masked
    vector, the SuperNode keeps the previous context, and the site's next stage fails ("expect collect_masked_vectors
    stage, but receive unmask stage"), dropping the site from the round.  The state is therefore also mirrored in the
    site's ``state-dir`` (:func:`secagg_state_path`, owner-only) after every stage but the last (unmask deletes it)
    and restored from there before the next one: the disk copy is never older than the context's.
    """
    if not is_secure(msg):
        return call_next(msg, ctxt)
    path = secagg_state_path(ctxt, msg.metadata.run_id)
    _restore_state(ctxt, path)
    state = np.random.get_state()
    try:
        reply = secaggplus_mod(msg, ctxt, call_next)
    finally:
        np.random.set_state(state)
    if reply.has_error():
        return reply
    if ctxt.state.config_records[RECORD_KEY_STATE].get("current_stage") == Stage.UNMASK:
        path.unlink(missing_ok=True)  # the round is over for this site; the next starts with a new setup
    else:
        _save_state(ctxt, path)
    return reply


def secagg_state_path(ctxt: Context, run_id: int):
    """Where a site mirrors its SecAgg+ state of run ``run_id``: ``<state-dir>/secaggplus-<run id>.bin``."""
    from privreid.flower.site import NODE_STATE_DIR, Site

    state_dir = ctxt.node_config.get(NODE_STATE_DIR)
    root = Path(str(state_dir)).expanduser() if state_dir else Site.from_node_config(ctxt.node_config).state_dir
    return root / f"secaggplus-{run_id}.bin"


def _save_state(ctxt: Context, path) -> None:
    data = config_record_to_proto(ctxt.state.config_records[RECORD_KEY_STATE]).SerializeToString()
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the site's secret keys
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    write_file_atomically(path, write, stream=False)


def _restore_state(ctxt: Context, path) -> None:
    """Put the mirrored state (the site's latest) in ``ctxt``."""
    if not path.is_file():
        return
    proto = ProtoConfigRecord()
    proto.ParseFromString(path.read_bytes())
    ctxt.state.config_records[RECORD_KEY_STATE] = config_record_from_proto(proto)


def reports_to_metrics(reports: StateDict) -> dict[str, int | float]:
    """``Upload.reports`` as scalar metrics, per report ``key``: ``<prefix><key>:dtype`` (an index into
    :data:`REPORT_DTYPES`), ``:ndim``, ``:dim<j>`` (the shape) and ``:<i>`` (the values, row-major).

    Values travel as Python floats (doubles) or ints, so float64, float32 and int64 tensors come back bit-exactly
    (:func:`split_reports`).
    """
    from privreid.flower.messages import FlowerRunError

    out: dict[str, int | float] = {}
    for key, tensor in reports.items():
        if tensor.dtype not in REPORT_DTYPES:
            raise FlowerRunError(f"report {key} is {tensor.dtype}; a secure-aggregation reply carries "
                                 f"{', '.join(map(str, REPORT_DTYPES))} reports only")
        name = REPORT_PREFIX + key
        out[f"{name}:dtype"] = REPORT_DTYPES.index(tensor.dtype)
        out[f"{name}:ndim"] = tensor.dim()
        out.update({f"{name}:dim{j}": int(n) for j, n in enumerate(tensor.shape)})
        out.update({f"{name}:{i}": v for i, v in enumerate(tensor.detach().cpu().reshape(-1).tolist())})
    return out


def split_reports(metrics: dict[str, Any], allowed: tuple[str, ...], src: object = "?"
                  ) -> tuple[dict[str, Any], StateDict]:
    """``(training metrics, reports)`` of a ``FitRes``'s metrics: the inverse of :func:`reports_to_metrics`.

    Refuses (:class:`FlowerRunError`) a report key outside ``allowed`` (the ledger's keys,
    :func:`~privreid.flower.messages.ledger_keys`) and a report that is not exactly one dtype, shape and that many
    values.
    """
    from privreid.flower.messages import FlowerRunError

    plain: dict[str, Any] = {}
    fields: dict[str, dict[str, Any]] = {}
    for name, value in metrics.items():
        if name.startswith(REPORT_PREFIX):
            key, _, field_ = name[len(REPORT_PREFIX):].rpartition(":")
            fields.setdefault(key, {})[field_] = value
        else:
            plain[name] = value
    reports: StateDict = {}
    for key, found in fields.items():
        if key not in allowed:
            raise FlowerRunError(f"site {src} sent a privacy-ledger report {key!r} that no enabled defense reads")
        try:
            reports[key] = _report(found)
        except (KeyError, IndexError, ValueError):
            raise FlowerRunError(f"site {src} sent a malformed privacy-ledger report {key!r}") from None
    return plain, reports


def _report(found: dict[str, Any]) -> torch.Tensor:
    """One report from its fields (:func:`reports_to_metrics`); KeyError, IndexError or ValueError if malformed."""
    def count(name: str) -> int:
        value = found[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(name)
        return value

    dtype = REPORT_DTYPES[count("dtype")]
    shape = [count(f"dim{j}") for j in range(count("ndim"))]
    values = [found[str(i)] for i in range(math.prod(shape))]
    kinds = (float, int) if dtype.is_floating_point else (int,)
    if any(isinstance(v, bool) or not isinstance(v, kinds) for v in values) or len(found) != 2 + len(shape) + len(values):
        raise ValueError("values")
    return torch.tensor(values, dtype=dtype).reshape(shape)


def round_seed(seed: int, round_index: int) -> int:
    """The protocol seed of round ``round_index``: what the in-process ``SecureAggregate`` draws.

    That is the first draw of the server's random stream, which the engine seeds with ``derive_seed(seed, "server",
    round_index)`` before it aggregates (``FederatedEngine.finish_round``); drawn here in a forked stream, so the
    server's own stream is untouched.
    """
    from privreid.seeding import derive_seed

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "server", round_index))
        return int(torch.randint(0, 2**62, (1,)))


def fit_message_content(content: RecordDict) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(run record fields, received state)`` of a collect-stage message (legacy ``FitIns``)."""
    fitins = compat.recorddict_to_fitins(content, keep_input=True)
    names = str(fitins.config[KEYS]).split(",")
    arrays = parameters_to_ndarrays(fitins.parameters)
    state = {n: torch.from_numpy(np.array(a, copy=True)) for n, a in zip(names, arrays)}
    return dict(fitins.config), state


def secure_fit_reply(engine, client, round_index: int, fields: dict[str, Any], received) -> RecordDict:
    """Train like the in-process engine; the ``FitRes`` the mod masks: the client's vector and weight."""
    upload = engine.train_client(client, round_index, received=received)
    strategy = engine.strategy
    keys = strategy._vector_keys(received, upload)
    extras = [k for k in upload.state if k not in strategy.model_keys]
    if extras:
        raise ValueError(f"secure aggregation on Flower sums model updates only; this method also uploads "
                         f"{extras[:2]}")
    vector, weight, _, _ = strategy.client_input(received, upload, keys, [], {}, int(fields[CLIENTS]),
                                                 int(fields[SEED]))
    scale, clip = float(fields[SCALE]) * weight, float(fields[CLIP])  # the mod pre-scales by weight / max_weight
    metrics = {k: float(v) for k, v in upload.metrics.items()}
    reserved = [k for k in metrics if k.startswith(REPORT_PREFIX)]
    if reserved:
        raise ValueError(f"training metric {reserved[0]!r} uses the reserved prefix {REPORT_PREFIX!r}")
    metrics.update(reports_to_metrics(upload.reports))  # the privacy ledger's: mechanism parameters, no data
    metrics.update({"secagg_saturated": float(sum(int(np.count_nonzero(np.abs(v * scale) > clip)) for v in vector)),
                    "secagg_values": float(sum(v.size for v in vector))})
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(vector), int(round(weight)), metrics)
    # the mod quantises this vector next, drawing its stochastic rounding from numpy's global generator:
    # seed it as the in-process protocol does (secure_aggregation_mod restores it afterwards)
    np.random.seed(rounding_seed(int(fields[SEED]), client.name))
    return compat.fitres_to_recorddict(fitres, keep_input=True)


def check_secure_reply(reply: Message, ledger: tuple[str, ...] = ()) -> None:
    """The privacy gate for SecAgg+ replies: no tensor leaves a site, only protocol bytes and scalars.

    The ``FitRes`` metrics must be scalars; those under :data:`REPORT_PREFIX`
    must be well-formed reports of the keys in ``ledger`` (:func:`split_reports`).
    """
    from privreid.flower.messages import FlowerRunError

    if reply.has_error():
        return
    content, src = reply.content, reply.metadata.src_node_id
    for name, record in content.array_records.items():
        if len(record):
            raise FlowerRunError(f"site {src} sent parameters ({name!r}) in a secure-aggregation reply")
    for name, record in content.config_records.items():
        if name not in ALLOWED_CONFIGS:
            raise FlowerRunError(f"site {src} sent an unexpected record {name!r} in a secure-aggregation reply")
        if name == RECORD_KEY_CONFIGS and Key.MASKED_PARAMETERS in record:
            continue
        if name == "fitres.metrics":
            for key, value in record.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise FlowerRunError(f"site {src} sent a non-scalar metric {name}.{key}")
            split_reports(dict(record), ledger, src)
        for key, value in record.items():
            if isinstance(value, list) and any(isinstance(v, bytes) and len(v) > 4096 for v in value):
                raise FlowerRunError(f"site {src} sent a large byte string {name}.{key} in a secure-aggregation "
                                     "reply")
    for name, record in content.metric_records.items():
        for key, value in record.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise FlowerRunError(f"site {src} sent a non-scalar metric {name}.{key}")


def payload_bytes(content: RecordDict | None) -> int:
    """Bytes of a message's payload: arrays' serialised bytes, byte strings, strings, 8 per number."""
    if content is None:
        return 0

    def size(value) -> int:
        if isinstance(value, (bytes, str)):
            return len(value)
        if isinstance(value, list):
            return sum(size(v) for v in value)
        return 8

    total = sum(len(a.data) for record in content.array_records.values() for a in record.values())
    for records in (content.config_records, content.metric_records):
        total += sum(size(v) for record in records.values() for v in record.values())
    return total


class _GatedGrid:
    """The Grid the workflow talks through: every reply passes :func:`check_secure_reply`; replies are kept,
    the payload bytes sent (down) and received (up) are counted (:func:`payload_bytes`), and why a site
    dropped out (an error reply, or none within the timeout) is noted in ``failures`` by node id."""

    #: the SecAgg+ workflow's four exchanges, in order
    STAGES = ("setup", "share keys", "collect masked vectors", "unmask")

    def __init__(self, grid, ledger: tuple[str, ...] = ()):
        self.grid, self.ledger, self.replies = grid, ledger, []
        self.bytes_down = self.bytes_up = 0
        self.failures: dict[int, str] = {}
        self.exchanges = 0

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        stage = self.STAGES[min(self.exchanges, len(self.STAGES) - 1)]
        self.exchanges += 1
        self.bytes_down += sum(payload_bytes(m.content) for m in messages)
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        for reply in replies:
            check_secure_reply(reply, self.ledger)
            self.bytes_up += 0 if reply.has_error() else payload_bytes(reply.content)
            if reply.has_error():
                code = {v: k for k, v in vars(ErrorCode).items() if isinstance(v, int)}.get(reply.error.code)
                reason = " ".join(str(reply.error.reason).split())[:300]  # a traceback, too, on one line
                self.failures[reply.metadata.src_node_id] = f"{stage}: {code or reply.error.code}: {reason}"
        replied = {r.metadata.src_node_id for r in replies}
        for m in messages:
            if m.metadata.dst_node_id not in replied:
                self.failures[m.metadata.dst_node_id] = f"{stage}: no reply" + (f" within {timeout:g} s" if timeout else "")
        self.replies.extend(replies)
        return replies

    def __getattr__(self, name):
        return getattr(self.grid, name)


class _Proxy(ClientProxy):
    """A selected site as the legacy workflow addresses it (only its node id is used)."""

    def __init__(self, name: str, node_id: int):
        super().__init__(name)
        self.node_id = node_id

    def get_properties(self, ins, timeout, group_id):
        raise NotImplementedError

    def get_parameters(self, ins, timeout, group_id):
        raise NotImplementedError

    def fit(self, ins, timeout, group_id):
        raise NotImplementedError

    def evaluate(self, ins, timeout, group_id):
        raise NotImplementedError

    def reconnect(self, ins, timeout, group_id):
        raise NotImplementedError


class _RoundStrategy(LegacyStrategy):
    """One round's legacy strategy: the selection and what each site receives; keeps the aggregate."""

    def __init__(self, instructions: list[tuple[_Proxy, FitIns]]):
        self.instructions, self.results, self.failures = instructions, [], []

    def initialize_parameters(self, client_manager):
        return None

    def configure_fit(self, server_round, parameters, client_manager):
        return list(self.instructions)

    def aggregate_fit(self, server_round, results, failures):
        self.results, self.failures = list(results), list(failures)
        return (results[0][1].parameters if results else None), {}

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        return None


class _SecAggPlusWorkflow(SecAggPlusWorkflow):
    """flwr 1.41's ``SecAggPlusWorkflow`` with one fix: who is dead at the unmask stage.

    A site that drops out during the share-keys stage never sent its key shares, so no other site masked its vector
    against it (``secaggplus_mod`` adds pairwise masks only for the sites whose shares it received).  In SecAgg+ (Bell
    et al. 2020; Bonawitz et al. 2017, Round 3) the dead set at unmask is those who shared keys but sent no masked
    vector.  flwr 1.41 computes it as every site sampled at setup minus the survivors, so it asks the survivors for
    shares of the early dropout that they never received, each of them fails (``KeyError``) and the round aborts.
    After the share-keys stage the sampled set becomes the sites that shared their keys.  (Overriding one stage is the
    smallest change; the protocol and its cryptography stay Flower's.)
    """

    def share_keys_stage(self, grid, context, state) -> bool:
        ok = super().share_keys_stage(grid, context, state)
        state.sampled_node_ids = set(state.active_node_ids)
        return ok


def secure_round(grid, round_no: int, transmissions, run_fields: dict[str, Any], params, *, seed: int,
                 timeout: float | None = None, ledger: tuple[str, ...] = ()
                 ) -> tuple[list[np.ndarray], list[str], list[str], list[dict], dict]:
    """Run SecAgg+ for one round; ``(weighted mean vector, survivors, dropped, survivors' metrics, bytes)``.

    ``bytes``: ``{"bytes_up", "bytes_down"}``, the payload of every message of the four stages (:func:`payload_bytes`;
    the download's tensors included).

    ``transmissions``: ``[(client (name, node_id), received state)]``;
    ``params``: :class:`~privreid.defenses.secure_aggregation.protocol.Parameters` (checked by the caller);
    ``ledger``: the report keys the sites' metrics may carry (:func:`check_secure_reply`).
    """
    from privreid.flower.messages import FlowerRunError

    m = len(transmissions)
    instructions = []
    for client, received in transmissions:
        config = {**run_fields, KEYS: ",".join(received), CLIENTS: m, SEED: seed, SCALE: 1.0 / params.max_weight,
                  CLIP: params.clipping_range}
        arrays = [v.detach().cpu().numpy() for v in received.values()]
        instructions.append((_Proxy(client.name, client.node_id), FitIns(ndarrays_to_parameters(arrays), config)))
    strategy = _RoundStrategy(instructions)
    state = RecordDict({MAIN_CONFIGS_RECORD: ConfigRecord({"current_round": round_no}),
                        MAIN_PARAMS_RECORD: ArrayRecord()})
    context = LegacyContext(Context(run_id=0, node_id=0, node_config={}, state=state, run_config={}),
                            strategy=strategy)
    shares = params.num_shares / m if params.num_shares < m else 1.0
    workflow = _SecAggPlusWorkflow(num_shares=shares, reconstruction_threshold=params.threshold / params.num_shares,
                                   max_weight=params.max_weight, clipping_range=params.clipping_range,
                                   quantization_range=params.quantization_range,
                                   modulus_range=params.modulus_range, timeout=timeout)
    gated = _GatedGrid(grid, ledger)
    workflow(gated, context)
    names = {p.node_id: p.cid for p, _ in instructions}
    if not strategy.results:
        why = "; ".join(f"{names.get(n, n)} ({w})" for n, w in sorted(gated.failures.items())) or "none reported"
        wait = (f"each stage waits {timeout:g} s for the sites' replies (--round-timeout; raise it on a slow or "
                "loaded machine)" if timeout else "each stage waits without a time limit (--round-timeout 0)")
        raise FlowerRunError(f"round {round_no}: secure aggregation aborted: fewer than {params.threshold} sites "
                             f"survived to unmask; dropped: {why}; {wait}")
    survivors = [names[p.node_id] for p, _ in strategy.results]
    dropped = [n for n in names.values() if n not in survivors]
    mean = parameters_to_ndarrays(strategy.results[0][1].parameters)
    metrics = [dict(res.metrics) for _, res in strategy.results]
    return mean, survivors, dropped, metrics, {"bytes_up": gated.bytes_up, "bytes_down": gated.bytes_down}


def collect_secure(engine, round_index: int, selected) -> list:
    """:meth:`FlowerServerEngine.collect_uploads` under ``--secure-aggregation``: one :class:`AggregatedUpload`."""
    from privreid.defenses.secure_aggregation.mechanism import AggregatedUpload, round_parameters
    from privreid.federated.strategy import Upload
    from privreid.flower.messages import FlowerRunError, ledger_keys

    round_no = round_index + 1
    strategy = engine.strategy
    if strategy.input_bound is not None:  # a site's weight is public here: a rejected input would still count
        raise FlowerRunError(f"defense {strategy.input_bound[2]!r} under --secure-aggregation (a verified input "
                             "bound) runs in-process only (`privreid train --secure-aggregation`)")
    transmissions = []
    for client in selected:
        received = engine.transmission(client, round_index)
        extra = [k for k in received if k not in strategy.model_keys]
        if extra:
            raise FlowerRunError(f"method {engine.method.name!r}: its server transmits state beyond the model "
                                 f"({', '.join(extra[:2])}), which secure aggregation on Flower does not carry")
        transmissions.append((client, received))
    weights = {c.name: float(strategy.weight(Upload(c.name, {}, c.num_samples))) for c in selected}
    max_weight = engine.config.privacy.secagg_max_weight or max(weights.values())
    params = round_parameters(engine.config, len(selected), 1.0 if strategy.dp else max_weight)
    params.check(len(selected))
    seed = round_seed(engine.config.runtime.seed, round_index)
    ledger = ledger_keys(engine.config)
    mean, survivors, dropped, metrics, sizes = secure_round(
        engine.link.grid, round_no, transmissions, dict(engine.link._run(round=round_index)), params, seed=seed,
        timeout=engine.link.settings.round_timeout or None, ledger=ledger)
    saturated = values = 0
    by_name = {c.name: c for c in selected}
    for name, met in zip(survivors, metrics):
        saturated += int(met.pop("secagg_saturated", 0))
        values += int(met.pop("secagg_values", 0))
        met, reports = split_reports(met, ledger, name)
        engine._record({"round": round_no, "scope": "train", "client": name, **met})
        for observer in engine.observers:  # the privacy ledger reads the reports, as in the engine's ``receive``
            observer.on_upload(Upload(name, {}, by_name[name].num_samples, met, reports=reports))
    needed = engine.min_clients or len(selected)
    if dropped:
        engine.log(f"round {round_no}: {', '.join(dropped)} dropped out; the protocol removed their masks")
    if len(survivors) < needed:
        raise FlowerRunError(f"round {round_no}: {len(survivors)} of {len(selected)} selected sites sent a masked "
                             f"vector, {needed} needed (--min-clients {engine.min_clients})")
    keys = strategy._vector_keys(engine.global_state, Upload("", transmissions[0][1], 0))
    q_total = sum(round(weights[n] / params.max_weight * params.quantization_range) for n in survivors)
    report = {"scope": "secagg", "runtime": "flower", "clients": len(survivors), "dropped": dropped,
              "saturated": saturated, "values": values, "saturated_fraction": saturated / max(values, 1),
              "quantisation_error_bound": len(survivors) * params.quantum() * params.quantization_range / q_total,
              "total_weight": q_total / params.quantization_range * params.max_weight,
              "message_bytes_up": sizes["bytes_up"], "message_bytes_down": sizes["bytes_down"]}
    state = strategy.aggregate_state(engine.global_state, keys, mean)
    return [AggregatedUpload(state, report["total_weight"], report)]
