"""What a checkpoint may hold and what is trusted on load (issue 26): file names, confinement, the safe loader,
integrity, non-finite weights, resume of damaged memory files, disk use."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import pytest
import torch

from privreid.checkpoint import INTEGRITY_KEY, Checkpoint, load_checkpoint, save_checkpoint
from privreid.errors import CheckpointError
from privreid.federated.divergence import TrainingDiverged
from privreid.federated.engine import FederatedEngine
from privreid.rundir import MEMORY_DIR, memory_file_name
from privreid.models import build_model
from privreid.pickle_scan import UnsafePickle, safe_torch_load
from privreid.config import RunConfig

from conftest import tiny_config
from test_engine import federation
from privreid.composition import build_run


def _run(tiny_synth, out: Path, names: tuple[str, str] | None = None, rounds: int = 1, **train) -> FederatedEngine:
    cfg = tiny_config(tiny_synth, rounds=rounds, **train)
    fed = federation(cfg)
    if names is not None:
        for client, name in zip(fed.clients, names):
            client.name = name
    engine = FederatedEngine(cfg, fed, out, progress=False, build=build_run)
    engine.run()
    return engine


@pytest.mark.parametrize("names", [("site a", "site_a"), ("café", "caf_")], ids=["space", "non-ascii"])
def test_clients_whose_names_reduce_alike_keep_their_own_memory_and_model(tiny_synth, tmp_path, names):
    assert memory_file_name(names[0], 1) != memory_file_name(names[1], 1)
    _run(tiny_synth, tmp_path, names)
    files = load_checkpoint(tmp_path / "ckpt.pt", client_memory=False)["client_memory_files"]
    assert len(set(files.values())) == 2 and all((tmp_path / MEMORY_DIR / f).is_file() for f in files.values())
    ckpt = Checkpoint.load(tmp_path / "ckpt.pt")
    a, b = (ckpt.load_model(n).state_dict() for n in names)
    backbone = [k for k in a if k in ckpt.global_state and a[k].is_floating_point()]
    assert any(not torch.equal(a[k], b[k]) for k in backbone)  # each client's own trained copy


def test_memory_file_names_stay_in_their_folder_and_round_trip():
    from urllib.parse import unquote

    for name in ("../..", "a/b", "..", "site a", "Zoë", "x%41"):
        file = memory_file_name(name, 3)
        assert "/" not in file and file not in (".", "..") and unquote(file[:-len(".r3.pt")]) == name


@pytest.fixture(scope="module")
def finished(tiny_synth, tmp_path_factory) -> Path:
    """A finished 2-round FedPav run (client memories in files)."""
    out = tmp_path_factory.mktemp("finished")
    _run(tiny_synth, out, rounds=2)
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(run, tmp_path / "run"))


def _rename_memory(run: Path, client: str, file: str) -> None:
    raw = load_checkpoint(run / "ckpt.pt", client_memory=False)
    raw["client_memory_files"][client] = file
    save_checkpoint(raw, run / "ckpt.pt")


@pytest.mark.parametrize("target", ["/etc/passwd", "../../outside.pt", "../ckpt.pt", "link.pt"])
def test_a_checkpoint_never_reads_a_memory_file_outside_its_run(finished, tmp_path, target):
    run = _copy(finished, tmp_path)
    outside = tmp_path / "outside.pt"
    torch.save({"x": torch.ones(1)}, outside)
    (run / MEMORY_DIR / "link.pt").symlink_to(outside)
    _rename_memory(run, "synthA", target)
    for client_memory in (True, False):
        with pytest.raises(CheckpointError, match="outside"):
            load_checkpoint(run / "ckpt.pt", client_memory=client_memory)


def test_the_safe_loader_refuses_a_malicious_pickle_whatever_the_environment(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    bad = tmp_path / "inversion-visible.pt"
    torch.save({"subject": Evil()}, bad)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(UnsafePickle, match="contains the global .*open"):
        safe_torch_load(bad)
    assert not marker.exists()
    with pytest.warns(UserWarning):  # what the environment variable does to a load that does not pass weights_only
        torch.load(bad)
    assert marker.exists()
    marker.unlink()
    (tmp_path / "plain.pt").write_bytes(pickle.dumps(Evil(), protocol=4))
    with pytest.raises(UnsafePickle, match="contains the global .*open"):  # a bare pickle is scanned too
        safe_torch_load(tmp_path / "plain.pt")
    assert not marker.exists()


def test_a_stack_global_built_from_the_memo_counts_as_unsafe(tmp_path):
    from privreid.pickle_scan import UNKNOWN_GLOBAL, pickle_globals

    # protocol 4: "os" and "system" memoised, then fetched back with BINGET before STACK_GLOBAL
    data = (b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94h\x00h\x01\x93\x8c\x04true\x85R.")
    path = tmp_path / "p.pkl"
    path.write_bytes(data)
    assert pickle_globals(path) == ["os.system"]
    data = b"\x80\x04\x8c\x02os\x8c\x06system(\x93."  # a MARK between the strings and STACK_GLOBAL
    path.write_bytes(data)
    assert pickle_globals(path) == [UNKNOWN_GLOBAL]


def test_every_torch_load_in_privreid_goes_through_the_safe_loader():
    import re

    import privreid

    root = Path(privreid.__file__).parent
    calls = [str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "pickle_scan.py"
             for line in p.read_text().splitlines()
             if re.search(r"torch\.load\(", line.split("#")[0]) and "``" not in line]
    # models/external/files.py reads foreign model files through it too (issue 40: the numpy allow-list is there)
    assert calls == []


def _small_ckpt() -> dict:
    model = build_model(num_classes=0, arch="resnet18", feat_dim=32)
    return {"method": "fedpav", "round": 1, "config": RunConfig().to_dict(), "model_config": model.model_config(),
            "global_state": {**model.state_dict(), "probe": torch.arange(4096, dtype=torch.int32)},
            "client_states": {}}


def test_flipped_bytes_in_tensor_data_are_refused_and_old_checkpoints_too(tmp_path):
    path = save_checkpoint(_small_ckpt(), tmp_path / "ckpt.pt")
    assert load_checkpoint(path)[  # the hash is checked and dropped from what a reader sees
        "round"] == 1 and INTEGRITY_KEY not in load_checkpoint(path)
    raw = bytearray(path.read_bytes())
    at = bytes(raw).index(torch.arange(4096, dtype=torch.int32).numpy().tobytes()[400:800])
    for i in range(at, at + 200):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"is corrupted \(integrity hash mismatch\)"):
        load_checkpoint(path)
    old = tmp_path / "old.pt"
    torch.save({"format": "privreid-ckpt-v1", **_small_ckpt()}, old)  # written before the hash existed
    with pytest.raises(CheckpointError, match=r"old.pt is incomplete: missing integrity$"):
        load_checkpoint(old)


def test_a_state_that_becomes_non_finite_stops_the_run_and_keeps_the_last_finite_checkpoint(tiny_synth, tmp_path):
    cfg = tiny_config(tiny_synth, rounds=2)
    engine = FederatedEngine(cfg, federation(cfg), tmp_path, progress=False, build=build_run)
    update = engine.client_update

    def poisoned(ctx):  # the loss was finite; the weights it leaves are not
        metrics = update(ctx)
        if ctx.round == 1:
            with torch.no_grad():
                next(ctx.model.parameters()).fill_(float("nan"))
        return metrics

    engine.client_update = poisoned
    with pytest.raises(TrainingDiverged, match=r"round 2: the global model has non-finite weights.*round 1 .* is kept"):
        engine.run()
    ckpt = Checkpoint.load(tmp_path / "ckpt.pt")
    assert ckpt.round == 1 and all(torch.isfinite(v).all() for v in ckpt.global_state.values()
                                   if v.is_floating_point())
    ckpt.load_model()


def test_eval_refuses_non_finite_and_mismatched_weights_in_one_line(finished, tmp_path):
    run = _copy(finished, tmp_path)
    raw = load_checkpoint(run / "ckpt.pt", client_memory=False)
    key = next(k for k, v in raw["global_state"].items() if v.is_floating_point())
    raw["global_state"][key] = torch.full_like(raw["global_state"][key], float("nan"))
    save_checkpoint(raw, run / "ckpt.pt")
    with pytest.raises(CheckpointError, match=f"non-finite weights \\({key}"):
        Checkpoint.load(run / "ckpt.pt").load_model()
    raw = load_checkpoint(finished / "ckpt.pt", client_memory=False)
    raw["model_config"] = {**raw["model_config"], "feat_dim": 64}
    save_checkpoint(raw, run / "ckpt.pt")
    with pytest.raises(CheckpointError, match=r"has shape \(\d+.*\) in the checkpoint, \(64"):
        Checkpoint.load(run / "ckpt.pt").load_model()


@pytest.mark.parametrize("client_memory", ["full", "private"])
def test_memory_files_on_disk_peak_at_two_per_client_and_private_memory_writes_none(tiny_synth, tmp_path,
                                                                                  monkeypatch, client_memory):
    from privreid.data.catalog import build_federation
    from privreid.federated import memory_store

    cfg = tiny_config(tiny_synth, rounds=3, client_memory=client_memory)
    fed = build_federation(cfg.data.roots, test_domains=cfg.data.test_domains, protocol="by-identity",
                           num_clients=3)
    on_disk: list[int] = []
    save = memory_store.save_memory_file

    def counting(data, directory, file):
        save(data, directory, file)
        on_disk.append(len(list(directory.glob("*.pt"))))

    monkeypatch.setattr(memory_store, "save_memory_file", counting)
    engine = FederatedEngine(cfg, fed, tmp_path, progress=False, build=build_run)
    engine.run()
    n = len(fed.clients)
    assert n >= 3
    files = list((tmp_path / MEMORY_DIR).glob("*.pt"))
    if client_memory == "full":
        assert len(on_disk) == 3 * n and max(on_disk) <= 2 * n and len(files) == n  # superseded files pruned
    else:
        assert on_disk == [] and files == []
        ckpt = Checkpoint.load(tmp_path / "ckpt.pt")
        state = ckpt.load_model(fed.clients[0].name).state_dict()
        assert all(torch.equal(state[k], v) for k, v in ckpt.global_state.items())  # global + its local keys
