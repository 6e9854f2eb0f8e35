"""Tensors <-> Flower ``Array`` (privreid.flower.messages): the bytes of Flower's own conversion, one copy each way.

:func:`tensor_to_array` must produce exactly ``Array(ndarray)``'s fields and
``.npy`` bytes, and :func:`array_to_tensor` must read back what
``Array.numpy()`` reads, for every dtype and layout privreid sends: the
messages, and so the runs, stay bit for bit what they were with Flower's
``np.save``/``np.load`` path.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from flwr.app import Array

from privreid.flower.messages import (FlowerRunError, array_to_tensor, record_to_state, state_to_record,
                                      tensor_to_array)


def _tensors() -> dict[str, torch.Tensor]:
    """Every dtype and layout privreid sends: model parameters and buffers, counters, masks, summaries."""
    weights = torch.randn(6, 4)
    return {
        "float32 with nan, inf and -0": torch.tensor([[1.5, float("nan")], [float("-inf"), -0.0]]),
        "float16": torch.randn(3, 5).half(),
        "float64": torch.randn(7, dtype=torch.float64),
        "int64 (num_batches_tracked)": torch.tensor(12345678901, dtype=torch.int64),
        "bool mask": torch.tensor([True, False, True]),
        "uint8": torch.arange(200, 250, dtype=torch.uint8),
        "0-d float": torch.tensor(2.75),
        "empty": torch.zeros(0, 3),
        "empty 0-length last axis": torch.zeros(4, 0),
        "non-contiguous slice": weights[:, ::2],
        "transposed (Fortran order)": weights.t(),
        "channels_last conv weight": torch.randn(8, 3, 3, 3).to(memory_format=torch.channels_last),
        "expanded (stride 0)": torch.randn(3, 1).expand(3, 4),
    }


@pytest.mark.parametrize("name", list(_tensors()))
def test_tensor_to_array_writes_flowers_own_fields_and_bytes(name):
    tensor = _tensors()[name]
    ours, flowers = tensor_to_array(tensor), Array(tensor.numpy())
    assert (ours.dtype, ours.shape, ours.stype) == (flowers.dtype, flowers.shape, flowers.stype)
    assert ours.data == flowers.data


@pytest.mark.parametrize("name", list(_tensors()))
def test_array_to_tensor_reads_what_flower_reads_into_a_writable_copy(name):
    tensor = _tensors()[name]
    array = Array(tensor.numpy())
    back = array_to_tensor(array)
    expected = array.numpy()
    assert back.dtype == tensor.dtype and tuple(back.shape) == expected.shape == tuple(tensor.shape)
    assert back.numpy().tobytes() == np.ascontiguousarray(expected).tobytes()  # bits, NaN payloads included
    assert back.is_contiguous()
    if back.numel():
        back.view(-1)[0] = 1  # writable, and a copy: the message's bytes are untouched
        assert array.data == Array(tensor.numpy()).data


def test_state_round_trip_keeps_keys_order_dtypes_and_bits_and_refuses_bfloat16():
    state = _tensors()
    back = record_to_state(state_to_record(state))
    assert list(back) == list(state)
    for key, tensor in state.items():
        assert back[key].dtype == tensor.dtype and back[key].shape == tensor.shape
        assert back[key].numpy().tobytes() == tensor.contiguous().numpy().tobytes()
    with pytest.raises(FlowerRunError, match="tensor b is bfloat16"):
        state_to_record({"a": torch.zeros(2), "b": torch.zeros(2, dtype=torch.bfloat16)})


def _npy(array: np.ndarray, version=None) -> Array:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return Array(dtype=str(array.dtype), shape=tuple(array.shape), stype="numpy.ndarray", data=buffer.getvalue())


def test_array_to_tensor_reads_any_npy_header_flower_reads():
    """A peer's ``.npy`` of format 2.0, and a Fortran-ordered payload, read as ``np.load`` reads them."""
    fortran = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    for array in (_npy(fortran, version=(2, 0)), _npy(fortran)):
        assert torch.equal(array_to_tensor(array), torch.from_numpy(array.numpy().copy()))


def test_array_to_tensor_refuses_what_np_load_refuses():
    """No pickles (an object dtype in the header), a payload shorter than its header says, another stype."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|O", "fortran_order": False, "shape": (2,)})
    with pytest.raises(ValueError):
        array_to_tensor(Array(dtype="object", shape=(2,), stype="numpy.ndarray", data=header.getvalue() + bytes(16)))
    whole = _npy(np.arange(10, dtype=np.int64))
    with pytest.raises(ValueError):
        array_to_tensor(Array(dtype=whole.dtype, shape=whole.shape, stype=whole.stype, data=whole.data[:-8]))
    with pytest.raises(ValueError):
        array_to_tensor(Array(dtype="int64", shape=(1,), stype="numpy.ndarray", data=b"PK\x03\x04 not an npy"))
    with pytest.raises(TypeError, match="Unsupported serialization type"):
        array_to_tensor(Array(dtype=whole.dtype, shape=whole.shape, stype="torch.save", data=whole.data))


def test_state_to_record_reuses_the_arrays_of_tensors_it_converted_while_they_are_unchanged():
    """The server sends one global state to every client of a round: it is converted once, and converted again
    once a tensor changes in place or is replaced."""
    state = {"w": torch.randn(3, 4), "b": torch.zeros(4)}
    converted = {}
    first = state_to_record(state, converted)
    again = state_to_record(dict(state), converted)
    assert all(again[k] is first[k] for k in state)
    state["w"].add_(1)  # in place: the version counter moves
    state["b"] = torch.ones(4)  # another tensor
    third = state_to_record(state, converted)
    assert third["w"] is not first["w"] and third["b"] is not first["b"]
    assert all(third[k].data == tensor_to_array(state[k]).data for k in state)
    assert state_to_record(state)["w"] is not third["w"]  # without ``converted``, every call converts
