"""What travels between the privreid ServerApp and ClientApp, and the checks on it.

Message contents are Flower ``RecordDict`` objects (flwr 1.41 Message API):

========================  =====================================================
server -> site            records
========================  =====================================================
query (describe)          ``run`` ConfigRecord: the run configuration (JSON), the run key
train                     ``run`` (+ ``round``); ``global``: what the strategy's
                          ``configure`` transmits to this site (model keys, plus
                          e.g. DPPT's global centres of its identities)
evaluate                  ``run`` (+ ``round``); ``global``: the aggregated global state
========================  =====================================================

========================  =====================================================
site -> server            records
========================  =====================================================
query (describe)          ``site`` ConfigRecord (name, domain, the dataset's
                          identity numbers of the client's labels);
                          ``site-size`` MetricRecord (num_samples, num_classes)
train                     ``upload`` ArrayRecord (the trained shared keys);
                          ``train`` MetricRecord (scalar metrics); ``site-size``;
                          ``privacy-ledger``: the DP accountant's mechanism
                          parameters (no data), so the coordinator logs epsilon
                          and enforces ``--target-epsilon`` as in-process
evaluate                  one ``global/<split>/<testset>`` MetricRecord per test
                          set, one ``local/<split>/<testset>`` per test set of
                          the personalised model
========================  =====================================================

:func:`check_reply` is the server's privacy gate: a reply carrying anything else (a local-only key, a tensor of a
shape the shared model lacks, a non-scalar metric, another record) is refused; ``tests/test_flower.py`` asserts
it on every message. One allowance: tensors a client update adds outside the model
(``ClientContext.upload_extra``: DPPT's class centres, L2RW+ Eq. 5) pass as vectors or scalars, never
per-sample matrices.

Tensors travel as Flower ``Array`` objects (``.npy`` bytes, never pickles), so values round-trip bit-exactly;
dtypes NumPy lacks (bfloat16) are refused. :func:`tensor_to_array` and :func:`array_to_tensor` produce and read
exactly Flower's ``Array(ndarray)`` / ``Array.numpy()`` bytes with one copy each way instead of two or three (a
parallel run converts each state four times; a ResNet-18's 45 MiB took 35-45 ms per ``np.save``/``np.load``).
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.constant import SType

from privreid.config import RunConfig
from privreid.errors import PrivreidError
from privreid.federated.policy import StateDict
from privreid.federated.strategy import Upload

RUN = "run"
GLOBAL = "global"
UPLOAD = "upload"
TRAIN = "train"
SITE = "site"
SITE_SIZE = "site-size"
LEDGER = "privacy-ledger"
#: the keys a site's description may hold: two names and a list of identity numbers
SITE_FIELDS = {"name": str, "domain": str, "source_pids": list}


class FlowerRunError(PrivreidError):
    """A Flower run cannot go on: too few sites replied, a site failed or broke the protocol."""


# ----------------------------------------------------------------------------- tensors
def tensor_to_array(tensor: torch.Tensor) -> Array:
    """``Array(tensor)``: Flower's fields and ``.npy`` bytes (NumPy's format-1.0 header), with one copy of the
    data (C order, or Fortran order for a Fortran-contiguous array, as ``np.save``; a device tensor is first
    copied to the CPU)."""
    array = tensor.detach().cpu().numpy()
    fields = np.lib.format.header_data_from_array_1_0(array)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, fields)
    data = np.ascontiguousarray(array.T if fields["fortran_order"] else array)
    return Array(dtype=str(array.dtype), shape=tuple(array.shape), stype=SType.NUMPY,
                 data=b"".join((header.getvalue(), data.data)))


def array_to_tensor(array: Array) -> torch.Tensor:
    """``torch.from_numpy(array.numpy().copy())`` with one copy: a writable, C-contiguous tensor of the header's
    dtype and shape. NumPy's reader parses the header (an object dtype is refused with ``ValueError``, as
    ``np.load(allow_pickle=False)``); a format-3.0 header (structured dtypes only) goes through ``np.load``."""
    if array.stype != SType.NUMPY:
        raise TypeError(f"Unsupported serialization type for numpy conversion: '{array.stype}'")
    buffer = io.BytesIO(array.data)
    read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                   (2, 0): np.lib.format.read_array_header_2_0}.get(np.lib.format.read_magic(buffer))
    if read_header is None:
        return torch.from_numpy(array.numpy().copy())
    shape, fortran_order, dtype = read_header(buffer)
    flat = np.frombuffer(array.data, dtype, count=math.prod(shape), offset=buffer.tell())
    view = flat.reshape(shape[::-1]).T if fortran_order else flat.reshape(shape)
    return torch.from_numpy(view.copy())


#: a tensor converted by :func:`state_to_record`, the version it had, and its Array, by state key
Converted = dict[str, tuple[torch.Tensor, int, Array]]


def state_to_record(state: StateDict, converted: Converted | None = None) -> ArrayRecord:
    """A state dict as an ArrayRecord (:func:`tensor_to_array`; key order kept). ``converted`` reuses the Array
    of a tensor that is the same object at the same autograd version, so one global state sent to every client
    of a round is converted once."""
    record = ArrayRecord()
    for key, tensor in state.items():
        if tensor.dtype == torch.bfloat16:
            raise FlowerRunError(f"tensor {key} is bfloat16, which Flower's NumPy arrays cannot carry")
        made = converted.get(key) if converted is not None else None
        if made is None or made[0] is not tensor or made[1] != tensor._version:
            made = (tensor, tensor._version, tensor_to_array(tensor))
            if converted is not None:
                converted[key] = made
        record[key] = made[2]
    return record


def record_to_state(record: ArrayRecord) -> StateDict:
    """The inverse of :func:`state_to_record` (:func:`array_to_tensor`: writable tensors of the original dtypes and
    shapes)."""
    return {key: array_to_tensor(array) for key, array in record.items()}


def upload_content(upload: Upload, **records: Any) -> RecordDict:
    """A train reply: the upload's state and scalar metrics, ``records``, and the accountant's parameters it
    reports for the server's privacy ledger (DP-SGD)."""
    content = RecordDict({UPLOAD: state_to_record(upload.state), TRAIN: scalar_metrics(upload.metrics), **records})
    if upload.reports:
        content[LEDGER] = state_to_record(upload.reports)
    return content


def content_upload(name: str, content: RecordDict, num_samples: int) -> Upload:
    """The :class:`Upload` of client ``name`` in a train reply (:func:`upload_content`) past :func:`check_reply`."""
    ledger = content.array_records.get(LEDGER)
    return Upload(name, record_to_state(content.array_records[UPLOAD]), num_samples,
                  dict(content.metric_records[TRAIN]), reports=record_to_state(ledger) if ledger is not None else {})


# ----------------------------------------------------------------------------- scalars
def scalar_metrics(metrics: dict[str, Any]) -> MetricRecord:
    """Scalar metrics as a MetricRecord; ints stay ints, other numbers become floats."""
    out: dict[str, int | float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) and not _is_number(value):
            raise FlowerRunError(f"metric {key}={value!r} is not a scalar number; only scalars leave a site")
        out[key] = int(value) if isinstance(value, int) else float(value)
    return MetricRecord(out)


def _is_number(value: Any) -> bool:
    """NumPy / 0-d torch numbers (what evaluation code may return)."""
    return hasattr(value, "item") and getattr(value, "ndim", 1) == 0


def eval_records(scope: str, records: list[dict[str, Any]]) -> dict[str, MetricRecord]:
    """Metric records of the engine (``{"split", "testset", **results}``) as MetricRecords named
    ``<scope>/<split>/<testset>``."""
    return {f"{scope}/{r['split']}/{r['testset']}": scalar_metrics(
        {k: v for k, v in r.items() if k not in ("round", "scope", "client", "split", "testset")})
        for r in records}


def parse_eval_records(content: RecordDict, scope: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``[(split, testset, results), ...]`` of the ``scope/...`` MetricRecords, in message order."""
    out = []
    for name, record in content.metric_records.items():
        parts = name.split("/", 2)
        if len(parts) == 3 and parts[0] == scope:
            out.append((parts[1], parts[2], dict(record)))
    return out


def ledger_keys(config: RunConfig) -> tuple[str, ...]:
    """Client-memory keys the enabled defenses' ledgers read on the server (DP-SGD's accountant)."""
    from privreid.defenses.registry import enabled_defenses

    return tuple(k for d in enabled_defenses(config) for k in d.server_memory_keys(config))


# ----------------------------------------------------------------------------- run description
def run_record(config: RunConfig, run_key: str, **fields: int | bool) -> ConfigRecord:
    """The run configuration (JSON of :meth:`RunConfig.to_dict`), the run key and per-message fields."""
    return ConfigRecord({"config": json.dumps(config.to_dict(), sort_keys=True), "run-key": run_key, **fields})


def parse_run_record(content: RecordDict) -> tuple[RunConfig, str, ConfigRecord]:
    record = content.config_records[RUN]
    return RunConfig.from_dict(json.loads(str(record["config"]))).validate(), str(record["run-key"]), record


# ----------------------------------------------------------------------------- the privacy gate
def check_reply(reply: Message, *, kind: str, shared_shapes: dict[str, tuple[int, ...]],
                model_keys: set[str], ledger: tuple[str, ...] = ()) -> None:
    """Refuse (:class:`FlowerRunError`, naming the record) a ``kind`` reply (``query``, ``train``,
    ``evaluate``) holding anything but parameters of ``shared_shapes``, scalar metrics and the site's names;
    ``model_keys``: all the model's keys; ``ledger``: the memory keys a train reply may add (:func:`ledger_keys`)."""
    content = reply.content
    src = reply.metadata.src_node_id
    for name, record in content.array_records.items():
        if kind == "train" and name == LEDGER and set(record) <= set(ledger):
            continue
        if kind != "train" or name != UPLOAD:
            raise FlowerRunError(f"site {src} sent an unexpected parameter record {name!r} in a {kind} reply")
        keys = set(record)
        local = sorted((keys & model_keys) - set(shared_shapes))
        missing = sorted(set(shared_shapes) - keys)
        if local or missing:
            raise FlowerRunError(f"site {src} uploaded keys outside the shared policy (local-only {local[:3]}, "
                                 f"missing {missing[:3]})")
        for key, array in record.items():
            shape = tuple(array.shape)
            if key in shared_shapes and shape != tuple(shared_shapes[key]):
                raise FlowerRunError(f"site {src} uploaded {key} with shape {shape}, "
                                     f"expected {tuple(shared_shapes[key])}")
            if key not in model_keys and len(shape) > 1:
                raise FlowerRunError(f"site {src} uploaded a {shape} matrix {key!r} outside the model; "
                                     "only vectors (per-identity summaries) may accompany the parameters")
    for name, record in content.metric_records.items():
        for key, value in record.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise FlowerRunError(f"site {src} sent a non-scalar metric {name}.{key}")
    for name, record in content.config_records.items():
        ok = kind == "query" and name == SITE and set(record) <= set(SITE_FIELDS) and all(
            isinstance(v, SITE_FIELDS[k]) for k, v in record.items())
        if ok and "source_pids" in record:
            ok = all(isinstance(p, int) and not isinstance(p, bool) for p in record["source_pids"])
        if not ok:
            raise FlowerRunError(f"site {src} sent an unexpected configuration record {name!r} in a {kind} reply")
    if kind == "train" and UPLOAD not in content.array_records:
        raise FlowerRunError(f"site {src} replied to a train message without an upload")
