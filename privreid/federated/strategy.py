"""Server strategies: what each client receives, and how the uploads of one round are combined.

Flower's configure/aggregate split:

* :meth:`Strategy.configure` ``(global_state, client, client_server_state, round) -> state``: what the server
  transmits to one client (default: the global state);
* :meth:`Strategy.aggregate` ``(global_state, uploads) ->`` :class:`RoundResult`: the new global state plus the
  **per-client server state** the strategy keeps for the round's clients (FedPav-CC's cluster model of each client;
  most keep none).  The engine stores it, checkpoints it and hands each client's entry back to ``configure``;
* :meth:`Strategy.with_server_state` ``(server_state) -> strategy``: the strategy that aggregates a round given what
  the server kept in earlier rounds (:data:`ServerState`: every client's entry plus the server-wide
  :data:`SERVER_ENTRY`; FoolsGold's histories, centered clipping's momentum).  State in, state out: it reads the kept
  state, its ``RoundResult.client_state`` writes the new, so a ``--resume`` continues from the checkpointed state.

All are pure functions of their inputs (no training, no data access, no mutation), so every strategy is unit-testable
on hand-made state dicts (``tests/test_strategy_contract.py``).  The server sees only what :class:`Upload` carries."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from privreid.federated.policy import StateDict


@dataclass
class Upload:
    """What one client sends to the server after local training."""

    client: str
    state: StateDict
    num_samples: int
    metrics: dict[str, float] = field(default_factory=dict)
    #: tensors the client reports for the server's bookkeeping, not for aggregation (the DP-SGD
    #: accountant's mechanism parameters that the privacy ledger reads; no data)
    reports: StateDict = field(default_factory=dict)


#: what the server keeps about one client between rounds (tensors, strings, lists; checkpointed)
ClientServerState = dict[str, Any]
#: what the server kept from earlier rounds, as a strategy reads it (read-only): client name -> its
#: :data:`ClientServerState`, and the strategy's server-wide state under :data:`SERVER_ENTRY`
ServerState = Mapping[str, ClientServerState]
#: the entry of :data:`ServerState` that is no client's (client names are never empty): the server-wide state, written
#: as a client's is (``RoundResult.client_state[SERVER_ENTRY]``), checkpointed with them, never sent to a client
SERVER_ENTRY = ""


@dataclass
class RoundResult:
    """What one round's aggregation produces.  ``client_state`` maps a client (or :data:`SERVER_ENTRY`) to its new
    server state, replacing its entry (absent entries stay).  Entries may share tensors (the members of one FedPav-CC
    cluster share its model).  ``records``: what the aggregation reports for ``metrics.jsonl`` (the engine adds the round;
    secure aggregation's ``secagg`` record)."""

    global_state: StateDict
    client_state: dict[str, ClientServerState] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)


class Accumulator:
    """One round's aggregation on the server: :meth:`add` each upload once, as it arrives, then :meth:`result`.

    The engine never holds a round's uploads: it hands a fresh accumulator (:meth:`Strategy.accumulator`) every upload
    as it arrives (after its own checks and byte counting) and drops it; ``result()`` is called once, after the last
    upload, with the server's random stream seeded for the round.  An accumulator keeps a running sum
    (:class:`WeightedSum`) or the whole list (:class:`KeepUploads`).

    Wrapper strategies (defenses, secure aggregation) return their own accumulator around the inner one: they may
    transform each upload (clip, mask) or the result (add noise), and one that must see only the sum can require a
    streaming inner accumulator (``not isinstance(inner, KeepUploads)``)."""

    def add(self, upload: Upload) -> None:
        raise NotImplementedError

    def result(self) -> RoundResult:
        raise NotImplementedError


class KeepUploads(Accumulator):
    """The accumulator of a strategy that needs every upload at once: keeps the list, then calls ``aggregate``."""

    def __init__(self, aggregate: Callable[[list[Upload]], RoundResult]):
        self.aggregate = aggregate
        self.uploads: list[Upload] = []

    def add(self, upload: Upload) -> None:
        self.uploads.append(upload)

    def result(self) -> RoundResult:
        uploads, self.uploads = self.uploads, []
        return self.aggregate(uploads)


class Strategy:
    """Base class: how the server combines the uploads of one round.

    Streaming.  A strategy linear in the uploads (a weighted mean) overrides :meth:`accumulator` with a streaming fold
    (:class:`WeightedSum`), so the server holds one running sum instead of one shared state per client (the shape
    secure aggregation needs too).  Its :meth:`aggregate` is that fold over a list: both paths are bit-identical.
    Strategies that need every upload at once (CDW and KS weights, client clustering, KD) override :meth:`aggregate`
    instead; the default :meth:`accumulator` keeps the uploads (:class:`KeepUploads`) and calls it on the list.

    Secure aggregation.  A strategy whose new global state is a weighted mean of the uploads, computable from their sum
    alone, says so with :meth:`upload_weight`; secure aggregation and the audit's ``server-aggregate`` view run it on
    the (secure) sum of the pre-scaled uploads.  Wrappers (``NoisyAggregate``) delegate it to the strategy they wrap."""

    def upload_weight(self) -> Callable[[Upload], float] | None:
        """``w(upload)`` when the new global state is ``sum_k w_k state_k / sum_k w_k`` over the uploads'
        floating tensors (integer buffers from the heaviest upload), so that the server needs only the sum of
        ``w_k state_k`` and of ``w_k``; ``None`` (the default) when it reads uploads on their own, or takes
        any tensor from one upload (``bn_buffers="first"``)."""
        return None

    def configure(self, global_state: StateDict, client, client_server_state: Mapping[str, Any],
                  round_index: int) -> StateDict:
        """What the server transmits to ``client`` (a ``ClientData``) in round ``round_index``.

        ``client_server_state`` is the client's per-client server state (empty before one was kept).  The result's
        model keys are loaded into the client's model; any other entry reaches its client update as
        ``ClientContext.received_extra`` (DPPT's global centres of the client's identities).  Default: the global state.
        """
        return global_state

    def with_server_state(self, server_state: ServerState) -> Strategy:
        """This strategy for a round in which the server holds ``server_state`` from earlier rounds (the engine's,
        restored on ``--resume``): a new strategy when it reads that state, else itself (the default).  A wrapper
        returns itself around ``inner.with_server_state(server_state)``."""
        return self

    def accumulator(self, global_state: StateDict) -> Accumulator:
        """A fresh fold of one round's uploads against ``global_state`` (see :class:`Accumulator`)."""
        if type(self).aggregate is Strategy.aggregate:
            raise NotImplementedError(f"{type(self).__name__} defines neither accumulator() nor aggregate()")
        return KeepUploads(lambda uploads: self.aggregate(global_state, uploads))

    def aggregate(self, global_state: StateDict, uploads: list[Upload]) -> RoundResult:
        """The new global state (and per-client server state) from the round's ``uploads``; pure."""
        if not uploads:
            raise ValueError("cannot aggregate zero uploads")
        acc = self.accumulator(global_state)
        for up in uploads:
            acc.add(up)
        return acc.result()

    @property
    def needs_all_uploads(self) -> bool:
        """Whether the server must hold every upload of a round (a strategy that does not stream)."""
        return isinstance(self.accumulator({}), KeepUploads)


#: the last key component of BatchNorm's buffers (its running statistics and its batch counter)
NORM_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
#: what a weighted mean does with them: ``average`` them like the parameters, or take the round's ``first``
#: upload's (the FedPav reference code, cap-ntu/FedReID ``server.py``: it averages ``named_parameters()`` of a
#: deep copy of the first sampled client's model)
BN_BUFFER_MODES = ("average", "first")


def is_norm_buffer(key: str) -> bool:
    """True for a BatchNorm buffer of a state dict: its key ends in one of :data:`NORM_BUFFERS`."""
    return key.rpartition(".")[2] in NORM_BUFFERS


class WeightedSum(Accumulator):
    """``sum_k w_k state_k / sum_k w_k`` folded one upload at a time, in float64.

    ``weight(upload)`` gives ``w_k``.  Integer buffers (BatchNorm's ``num_batches_tracked``) cannot be averaged; they
    are taken from the upload with the largest weight (the first on ties).  With ``bn_buffers="first"`` every BatchNorm
    buffer (:func:`is_norm_buffer`) is the first upload's, as added (:data:`BN_BUFFER_MODES`).  Only the running sums
    and those small tensors are held, never an upload."""

    def __init__(self, weight: Callable[[Upload], float], bn_buffers: str = "average"):
        if bn_buffers not in BN_BUFFER_MODES:
            raise ValueError(f"bn_buffers must be one of {', '.join(BN_BUFFER_MODES)}, got {bn_buffers!r}")
        self.weight = weight
        self.bn_buffers = bn_buffers
        self.sums: dict[str, torch.Tensor] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self.integers: StateDict = {}
        #: the first upload's BatchNorm buffers (``bn_buffers="first"``)
        self.kept: StateDict = {}
        self.total = 0.0
        self.heaviest = float("-inf")
        self.first: str | None = None
        self.count = 0

    def add(self, upload: Upload) -> None:
        w = float(self.weight(upload))
        if self.first is None:
            self.first = upload.client
            if self.bn_buffers == "first":
                self.kept = {k: v.clone() for k, v in upload.state.items() if is_norm_buffer(k)}
            for key, value in upload.state.items():
                if torch.is_floating_point(value) and key not in self.kept:
                    self.sums[key] = torch.zeros_like(value, dtype=torch.float64)
                    self.dtypes[key] = value.dtype
        elif upload.state.keys() != self.sums.keys() | self.integers.keys() | self.kept.keys():
            raise ValueError(f"client {upload.client} uploaded a different set of keys")
        for key, acc in self.sums.items():
            acc.add_(upload.state[key].to(torch.float64), alpha=w)
        if w > self.heaviest:
            self.heaviest = w
            self.integers = {k: v.clone() for k, v in upload.state.items()
                             if not torch.is_floating_point(v) and k not in self.kept}
        self.total += w
        self.count += 1

    def mean(self) -> StateDict:
        """The weighted mean of the uploads added so far."""
        if self.count == 0:
            raise ValueError("cannot aggregate zero uploads")
        if self.total <= 0:
            raise ValueError("aggregation weights must sum to a positive value")
        out: StateDict = {k: (acc / self.total).to(self.dtypes[k]) for k, acc in self.sums.items()}
        out.update(self.integers)
        out.update(self.kept)
        return out

    def result(self) -> RoundResult:
        return RoundResult(self.mean())


def weighted_average(uploads: list[Upload], weights: list[float], bn_buffers: str = "average") -> StateDict:
    """``sum_k w_k * state_k / sum_k w_k`` for floating tensors (see :class:`WeightedSum`, also for ``bn_buffers``),
    for strategies whose weights depend on every upload at once (CDW, KS): the same fold as streaming."""
    if not uploads:
        raise ValueError("cannot aggregate zero uploads")
    if len(weights) != len(uploads):
        raise ValueError("one weight per upload is required")
    by_upload = {id(up): float(w) for up, w in zip(uploads, weights)}
    acc = WeightedSum(lambda up: by_upload[id(up)], bn_buffers)
    for up in uploads:
        acc.add(up)
    return acc.mean()


def data_volume(upload: Upload) -> float:
    """FedAvg's weight of an upload: its client's number of training samples ``n_k``."""
    return float(upload.num_samples)


def uniform(upload: Upload) -> float:
    """The weight of every upload in an unweighted mean: 1."""
    return 1.0


class DataVolumeAverage(Strategy):
    """FedAvg / FedPav server aggregation, ``w = sum_k (n_k / n) w_k`` (paper 004, Algorithm 1, line 7; ``n``: the
    round's clients' total volume).  ``bn_buffers``: :class:`WeightedSum`."""

    def __init__(self, bn_buffers: str = "average"):
        self.bn_buffers = bn_buffers

    def upload_weight(self) -> Callable[[Upload], float] | None:
        return data_volume if self.bn_buffers == "average" else None

    def accumulator(self, global_state: StateDict) -> WeightedSum:
        return WeightedSum(data_volume, self.bn_buffers)


class UniformAverage(Strategy):
    """Unweighted mean of the uploads, ``1/|C N| sum_m w_m`` (FedReID, paper 002, Eq. 9)."""

    def upload_weight(self) -> Callable[[Upload], float]:
        return uniform

    def accumulator(self, global_state: StateDict) -> WeightedSum:
        return WeightedSum(uniform)


class KeepGlobal(Strategy):
    """No aggregation: the global state is returned unchanged (standalone training)."""

    def accumulator(self, global_state: StateDict) -> Accumulator:
        return _Discard(global_state)


class _Discard(Accumulator):
    """Drops every upload; the result is the global state (a new dict, same tensors)."""

    def __init__(self, global_state: StateDict):
        self.global_state = global_state

    def add(self, upload: Upload) -> None:
        pass

    def result(self) -> RoundResult:
        return RoundResult(dict(self.global_state))
