"""``privreid train --parallel-clients K``: clients of a round on Flower's simulation engine (Ray), issue 29 section 2.

The fast tests drive :meth:`ParallelEngine.collect_uploads` through Flower's
wire in this process (:class:`~privreid.flower.loopback.LoopbackGrid`, no Ray): its scheduling (at most ``K`` in
flight, uploads folded in selection order whatever order the replies come
in) and the privacy gate.  The slow ones start Ray: K = 2 equals the
sequential engine bit for bit, and a run killed under K = 2 resumes to the
same result.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import pickle

import numpy as np
import pytest
import torch
from flwr.app import Array

from badinput import BadInput, check_refused
from conftest import kill_in_round, tiny_config
from privreid.checkpoint import load_checkpoint
from privreid.data.catalog import federation_for_config
from privreid.federated import memory_store
from privreid.federated.engine import FederatedEngine
from privreid.models.reid_net import CLASSIFIER_PREFIX
from privreid.flower import simulation
from privreid.flower.loopback import LoopbackGrid
from privreid.flower.messages import FlowerRunError, UPLOAD
from privreid.flower.simulation import (PUSHED_PER_WORKER, ParallelEngine, client_app, send_arrays_out_of_band,
                                       worker_engine)
from privreid.composition import build_run

#: the tests that start Ray (``pip install 'privreid[simulation]'``)
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")

TINY = ("--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8", "--max-steps", "2",
        "--rounds", "1", "--device", "cpu", "--quiet")


class ReorderingGrid(LoopbackGrid):
    """Flower's wire in this process (:class:`LoopbackGrid`, no Ray), handing back replies in the order ``order`` picks.

    ``pull_messages`` returns at most one reply per call: the ready one that
    ``order(ready ids)`` names (``min``/``max`` of random ids: any order);
    ``most_in_flight`` is the largest number of messages pushed and not yet
    pulled; ``tamper(reply)`` may change a reply before the server sees it.
    """

    def __init__(self, nodes: int, order=min, tamper=None):
        super().__init__(client_app, {node: {} for node in range(100, 100 + nodes)})
        self.order, self.tamper = order, tamper
        self.most_in_flight = 0

    def push_messages(self, messages):
        ids = super().push_messages(messages)
        self.most_in_flight = max(self.most_in_flight, len(self._replies))
        return ids

    def pull_messages(self, message_ids):
        ready = [mid for mid in message_ids if mid in self._replies]
        replies = super().pull_messages([self.order(ready)]) if ready else []
        for reply in replies if self.tamper else ():
            self.tamper(reply)
        return replies


def inline_run(cfg, out, k, **grid):
    """A :class:`ParallelEngine` run whose rounds go through :class:`ReorderingGrid` instead of a Ray simulation."""
    engine = ParallelEngine(cfg, federation_for_config(cfg), out, parallel_clients=k, progress=False, build=build_run)
    engine.attach(ReorderingGrid(len(engine.clients), **grid))
    summary = FederatedEngine.run(engine)
    return engine, summary


def assert_same_run(a, b):
    """Same metrics records and the same checkpointed global and local states, bit for bit."""
    read = lambda p: [json.loads(line) for line in (p / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert read(a) == read(b)
    ca, cb = load_checkpoint(a / "ckpt.pt"), load_checkpoint(b / "ckpt.pt")
    assert ca["global_state"].keys() == cb["global_state"].keys()
    assert all(torch.equal(ca["global_state"][k], cb["global_state"][k]) for k in ca["global_state"])
    assert ca["client_states"].keys() == cb["client_states"].keys()
    for name, state in ca["client_states"].items():
        assert all(torch.equal(state[k], cb["client_states"][name][k]) for k in state)


def test_uploads_fold_in_selection_order_with_at_most_2k_pushed(tiny_synth, tmp_path):
    """Replies that come back newest first still give the sequential engine's run, bit for bit; the server keeps
    at most ``2K`` messages out (``K`` training, ``K`` queued behind them): 2 of the 3 clients for ``K = 1``."""
    cfg = tiny_config(tiny_synth, rounds=2, client_memory="full")
    FederatedEngine(cfg, federation_for_config(cfg), tmp_path / "seq", progress=False, build=build_run).run()
    worker_engine.cache_clear()
    engine, _ = inline_run(cfg, tmp_path / "par", 1, order=max)
    assert engine.grid.most_in_flight == PUSHED_PER_WORKER * 1 == 2
    assert_same_run(tmp_path / "seq", tmp_path / "par")


def test_the_privacy_gate_refuses_a_local_key_in_an_upload(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=1)

    def smuggle(reply):  # the client's classifier, which never leaves a client, added to its upload
        from flwr.app import Array

        reply.content.array_records[UPLOAD][CLASSIFIER_PREFIX + "weight"] = Array(torch.zeros(6, 32).numpy())

    with pytest.raises(FlowerRunError, match=r"uploaded a \(6, 32\) matrix .classifier.weight."):
        inline_run(cfg, tmp_path / "par", 2, tamper=smuggle)
    assert not (tmp_path / "par" / "ckpt.pt").exists()


def test_a_failed_memory_write_fails_the_workers_next_client_and_stops_the_run(tiny_synth, tmp_path, monkeypatch):
    """A worker writes a client's memory after its reply; the write failing fails the worker's next client."""
    def disk_full(data, directory, file):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(memory_store, "save_memory_file", disk_full)
    worker_engine.cache_clear()
    with pytest.raises(FlowerRunError, match=r"client synth\w failed: .*No space left on device"):
        inline_run(tiny_config(tiny_synth, rounds=1), tmp_path / "par", 2)
    assert not (tmp_path / "par" / "ckpt.pt").exists()


def test_a_memory_file_that_never_lands_stops_the_run_before_its_checkpoint(tiny_synth, tmp_path, monkeypatch):
    """The server evaluates and checkpoints a round only once the memory files its workers write are on disk."""
    monkeypatch.setattr(memory_store, "save_memory_file", lambda data, directory, file: None)
    monkeypatch.setattr(simulation, "MEMORY_FILE_TIMEOUT_S", 0.05)
    worker_engine.cache_clear()
    with pytest.raises(FlowerRunError, match=r"client memory file synth\w\.r1\.pt was not written within 0\.05 s"):
        inline_run(tiny_config(tiny_synth, rounds=1), tmp_path / "par", 2)
    assert not (tmp_path / "par" / "ckpt.pt").exists()


@needs_ray
def test_arrays_cross_ray_out_of_band_and_unchanged():
    """Ray's pickler hands a Flower Array's bytes over as an out-of-band buffer, not inside the pickle."""
    import ray.cloudpickle

    send_arrays_out_of_band()
    array = Array(np.arange(10_000, dtype=np.float32).reshape(100, 100))
    buffers = []
    payload = ray.cloudpickle.dumps(array, protocol=5, buffer_callback=buffers.append)
    assert [b.raw().nbytes for b in buffers] == [len(array.data)] and len(payload) < 1000
    copy = pickle.loads(payload, buffers=buffers)
    assert (copy.dtype, copy.shape, copy.stype, copy.data) == (array.dtype, array.shape, array.stype, array.data)
    assert np.array_equal(copy.numpy(), array.numpy())


@pytest.mark.parametrize("k, says", [("0", "--parallel-clients must be >= 1"),
                                     ("4", "--parallel-clients 4 exceeds the 3 client(s) trained per round")])
def test_parallel_clients_out_of_range_is_refused(tiny_synth, tmp_path, k, says):
    case = BadInput(f"parallel-clients-{k}", ("train", "--data", "{synth}", *TINY, "--out", "{tmp}/run",
                                              "--parallel-clients", k), keep=("{tmp}/run",), says=says)
    check_refused(case, tmp_path, synth=tiny_synth)


@pytest.mark.slow
@needs_ray
def test_two_parallel_clients_on_ray_equal_the_sequential_engine(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=2)
    fed = federation_for_config(cfg)
    FederatedEngine(cfg, fed, tmp_path / "seq", progress=False, build=build_run).run()
    summary = ParallelEngine(cfg, fed, tmp_path / "par", parallel_clients=2, progress=False, build=build_run).run()
    assert summary["evaluated_round"] == 2
    assert_same_run(tmp_path / "seq", tmp_path / "par")


@pytest.mark.slow
@needs_ray
def test_a_run_killed_under_two_parallel_clients_resumes_to_the_same_result(tiny_synth, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_synth, rounds=2)
    fed = federation_for_config(cfg)
    FederatedEngine(cfg, fed, tmp_path / "seq", progress=False, build=build_run).run()
    kill_in_round(monkeypatch, ParallelEngine(cfg, fed, tmp_path / "par", parallel_clients=2, progress=False, build=build_run), 2)
    ParallelEngine(cfg, fed, tmp_path / "par", parallel_clients=2, progress=False, build=build_run).run(resume=True)
    assert_same_run(tmp_path / "seq", tmp_path / "par")
