"""Atomic writers (privreid.rundir): never a rename over a FIFO or device, a full disk is one line, umask permissions.

FIFOs are made with ``os.mkfifo`` in the test's temporary directory and read
by a thread (:class:`FifoReader`), so a test cannot hang; disk full is a
fault-injecting file (:func:`badinput.full_disk`), never a real device.
"""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from badinput import full_disk

from privreid.checkpoint import load_checkpoint, save_checkpoint
from privreid.export import export_model
from privreid.checkpoint import load_memory_file
from privreid.federated.memory_store import save_memory_file
from privreid.models import build_model
from privreid.io import OutputError, save_figure, save_torch, write_csv_rows, write_file_atomically, write_json_atomic, write_text_atomic
from privreid.config import RunConfig


class FifoReader:
    """A FIFO at ``path`` and a thread that reads everything written to it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        os.mkfifo(self.path)
        self.data = b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb") as fh:
            self.data = fh.read()

    def finish(self) -> bytes:
        """What was written; a reader still waiting for a writer is released (an empty read)."""
        while self.thread.is_alive() and stat.S_ISFIFO(self.path.stat().st_mode):
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as exc:  # ENXIO: the reader has not opened it yet
                assert exc.errno == errno.ENXIO
                time.sleep(0.01)
            self.thread.join(0.1)
        return self.data

    def is_fifo(self) -> bool:
        return stat.S_ISFIFO(self.path.lstat().st_mode)


@pytest.fixture
def fifo(tmp_path):
    reader = FifoReader(tmp_path / "out.fifo")
    yield reader
    reader.finish()


def tiny_model():
    return build_model("resnet18", feat_dim=16).eval()


def minimal_ckpt(model, **extra):
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.")}
    return {"method": "fedpav", "round": 1, "config": RunConfig().to_dict(), "model_config": model.model_config(),
            "global_state": state, "client_states": {}, "client_classes": {}, **extra}


# --------------------------------------------------------------------------- FIFOs: written through or refused
def test_text_and_json_are_written_through_a_fifo(fifo):
    write_text_atomic(fifo.path, "hello\n")
    assert fifo.finish() == b"hello\n" and fifo.is_fifo()


def test_json_is_written_through_a_fifo(fifo):
    write_json_atomic(fifo.path, {"b": 1, "a": [2]})
    assert json.loads(fifo.finish()) == {"a": [2], "b": 1} and fifo.is_fifo()


def test_csv_rows_are_written_through_a_fifo(fifo):
    write_csv_rows([{"a": 1, "b": 2}], fifo.path)
    assert fifo.finish().decode().splitlines() == ["a,b", "1,2"] and fifo.is_fifo()


def test_figures_are_written_through_a_fifo_in_the_format_of_the_suffix(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reader = FifoReader(tmp_path / "plot.png")
    save_figure(plt.figure(figsize=(1, 1)), reader.path)
    assert reader.finish().startswith(b"\x89PNG") and reader.is_fifo()
    save_figure(plt.figure(figsize=(1, 1)), tmp_path / "plot.svg")  # a regular file: the suffix, not .tmp
    assert b"<svg" in (tmp_path / "plot.svg").read_bytes() and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("fmt", ["state-dict", "torchreid"])
def test_state_dict_exports_are_written_through_a_fifo(fifo, fmt):
    model = tiny_model()
    export_model(model, fmt, fifo.path, height=32, width=16)
    payload = torch.load(io.BytesIO(fifo.finish()), weights_only=True)
    assert fifo.is_fifo() and payload["input"]["height"] == 32
    if fmt == "state-dict":
        want = model.state_dict()
        assert payload["state_dict"].keys() == want.keys()
        assert all(torch.equal(v, want[k]) for k, v in payload["state_dict"].items())


def test_onnx_export_refuses_a_fifo(fifo):
    pytest.importorskip("onnx")
    with pytest.raises(OutputError, match="is a FIFO"):
        export_model(tiny_model(), "onnx", fifo.path, height=32, width=16)
    assert fifo.finish() == b"" and fifo.is_fifo()


def test_checkpoint_refuses_a_fifo(fifo):
    with pytest.raises(OutputError, match="is a FIFO"):
        save_checkpoint(minimal_ckpt(tiny_model()), fifo.path)
    assert fifo.finish() == b"" and fifo.is_fifo()
    assert not list(fifo.path.parent.glob(".*.tmp"))


def test_memory_file_refuses_a_fifo(fifo):
    with pytest.raises(OutputError, match="is a FIFO"):
        save_memory_file({"x": torch.ones(3)}, fifo.path.parent, fifo.path.name)
    assert fifo.finish() == b"" and fifo.is_fifo()


def test_secagg_site_state_refuses_a_fifo_and_is_private(fifo, tmp_path):
    pytest.importorskip("flwr")
    from flwr.app import ConfigRecord
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_STATE

    from privreid.defenses.secure_aggregation.flower import _restore_state, _save_state

    def context():
        return SimpleNamespace(state=SimpleNamespace(config_records={RECORD_KEY_STATE: ConfigRecord({"stage": "x"})}))

    with pytest.raises(OutputError, match="is a FIFO"):
        _save_state(context(), fifo.path)
    assert fifo.finish() == b"" and fifo.is_fifo()
    old = os.umask(0o022)
    try:
        _save_state(context(), tmp_path / "state.bin")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "state.bin").stat().st_mode) == 0o600  # the site's secret keys
    restored = SimpleNamespace(state=SimpleNamespace(config_records={}))
    _restore_state(restored, tmp_path / "state.bin")
    assert restored.state.config_records[RECORD_KEY_STATE]["stage"] == "x"


def test_a_directory_is_refused_and_a_regular_file_replaced(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(OutputError, match="is a directory"):
        write_text_atomic(tmp_path / "d", "x")
    (tmp_path / "f").write_text("old")
    write_text_atomic(tmp_path / "f", "new")
    assert (tmp_path / "f").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["d", "f"]


# --------------------------------------------------------------------------- disk full
@pytest.mark.parametrize("room", [0, 100, 1000, 20_000])
def test_torch_save_on_a_full_disk_raises_the_os_error(tmp_path, monkeypatch, room):
    full_disk(monkeypatch, room=room, name="x.pt")
    with pytest.raises(OSError) as raised:
        save_torch({"a": torch.zeros(10_000)}, tmp_path / "x.pt")
    assert raised.value.errno == errno.ENOSPC


def test_other_torch_save_errors_are_not_called_disk_full(tmp_path, monkeypatch):
    def broken(obj, f, *args, **kwargs):
        raise RuntimeError("not a write failure")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(RuntimeError, match="not a write failure"):
        save_torch({"a": torch.zeros(3)}, tmp_path / "x.pt")


def test_checkpoint_on_a_full_disk_raises_the_os_error_and_keeps_the_previous_one(tmp_path, monkeypatch):
    model = tiny_model()
    path = save_checkpoint(minimal_ckpt(model, round=1), tmp_path / "ckpt.pt")
    before = path.read_bytes()
    full_disk(monkeypatch, room=4096, name=".ckpt.pt.privreid.tmp")
    with pytest.raises(OSError) as raised:
        save_checkpoint(minimal_ckpt(model, round=2), path)
    assert raised.value.errno == errno.ENOSPC
    assert path.read_bytes() == before and load_checkpoint(path)["round"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_state_dict_export_on_a_full_disk_leaves_nothing(tmp_path, monkeypatch):
    full_disk(monkeypatch, room=4096, name=".model.pt.privreid.tmp")
    with pytest.raises(OSError) as raised:
        export_model(tiny_model(), "state-dict", tmp_path / "model.pt", height=32, width=16)
    assert raised.value.errno == errno.ENOSPC and list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- permissions
@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_checkpoint_and_memory_files_take_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = save_checkpoint(minimal_ckpt(tiny_model()), tmp_path / "ckpt.pt")
        save_memory_file({"x": torch.arange(3)}, tmp_path, "a.r1.pt")
        write_json_atomic(tmp_path / "summary.json", {})
    finally:
        os.umask(old)
    for p in (path, tmp_path / "a.r1.pt", tmp_path / "summary.json"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask, p
    assert torch.equal(load_memory_file(tmp_path / "a.r1.pt")["x"], torch.arange(3))


def test_write_file_atomically_keeps_the_old_file_when_the_write_fails(tmp_path):
    (tmp_path / "f").write_text("old")

    def fail(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError):
        write_file_atomically(tmp_path / "f", fail)
    assert (tmp_path / "f").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f"]
