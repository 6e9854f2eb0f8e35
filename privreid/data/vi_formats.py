"""Loaders for the visible-infrared (VI) ReID benchmarks of L2RW+ (paper 003, Sec. IV-A), images and video.

Each loader returns a :class:`~privreid.data.types.ReIDDataset` whose
``query`` / ``gallery`` are the infrared-to-visible split (query infrared,
gallery visible: the mode every L2RW+ table uses), with ``modality`` (sample
path -> ``"visible"`` / ``"infrared"``) for every sample, the benchmark's
``vi_protocol`` (trials, CMC rule, co-located cameras; see
:class:`~privreid.data.types.VIProtocol`) and, for video, ``tracklets``
(sample key -> frame paths).  As for the RGB loaders, ``train`` pids are
relabelled ``0..N-1``, query/gallery keep the released pids, and camids are
0-based.  The released lists' own pid / camera numbering is used; nothing is
renumbered across modalities, so one identity has one pid in both.  The full
layouts are in ``docs/vi-datasets.md``.

``sysu-mm01`` / ``sysu-mm01-indoor`` (Wu et al., ICCV 2017)
    ``SYSU-MM01/cam{1..6}/<pid:04d>/<n:04d>.jpg`` and ``exp/{train,val,test}_id.txt``
    (comma-separated identity numbers).  Cameras 1, 2, 4, 5 are visible, 3 and
    6 infrared.  Train = train + val identities, every camera.  Query = the
    test identities' infrared images (cameras 3, 6); gallery = their visible
    images, cameras 1, 2, 4, 5 (all-search) or 1, 2 (indoor-search).  Protocol:
    10 single-shot gallery trials (one image per identity and camera), CMC by
    identity, and queries of camera 3 ignore camera 2 (same room), as the
    dataset's released evaluation (and AGW's ``eval_sysu``) does.
``regdb`` / ``regdb-<trial>`` (Nguyen et al., Sensors 2017; split files of Ye et al.)
    ``RegDB/idx/{train,test}_{visible,thermal}_<trial>.txt`` with
    ``<relpath> <label>`` lines (paths relative to the root), trials 1-10
    (``regdb`` is trial 1; each trial is its own train/test split, so run one
    experiment per trial and average).  Camera 0 is visible, 1 thermal.
    Query = test thermal, gallery = test visible, whole gallery, image CMC.
``llcm`` (Zhang & Wang, CVPR 2023)
    ``LLCM/idx/train_{vis,nir}.txt`` (``<relpath> <label>``, the path holds
    ``cam<k>``), ``idx/test_id.txt``, ``test_{vis,nir}/cam<k>/<pid:04d>/*.jpg``.
    Cameras record both modalities (camera ``k`` is camid ``k-1`` in both).
    Query = ``test_nir``, gallery = ``test_vis``; 10 single-shot gallery
    trials, CMC by identity; same-identity same-camera gallery images are
    dropped (the dataset's ``eval_llcm``).
``hitsz-vcm`` (Lin et al., CVPR 2022), video
    ``info/{train_name,test_name}.txt`` (one frame name per line, e.g.
    ``0001M1D1T0001F001.jpg``: pid, modality 1 = infrared / 2 = visible,
    camera ``D..``, tracklet ``T..``, frame ``F..``),
    ``info/track_{train,test}_info.txt`` (rows ``modality start end pid camera``,
    1-based inclusive ranges into the name list), ``info/query_IDX.txt``
    (1-based test rows that are queries); frames under
    ``Train/<pid>/<ir|rgb>/<D..>/<F..>`` and ``Test/...`` (the ``info/``,
    ``Train/`` and ``Test/`` levels are optional).  Tracklets shorter than
    ``min_seq_len`` = 12 frames are dropped (the released MITML loader).
    Query = the query rows that are infrared, gallery = the other rows that
    are visible.  A tracklet's key is ``<frame folder>/tracklet<row>``.
    Evaluation averages T = 6 frames per tracklet (the official setting).
``buptcampus`` (Du et al., 2023), video
    ``DATA/<pid>/{RGB,IR,FakeIR}/<camera>/...jpg``, ``data_paths.json``
    (``{pid: {RGB|IR: {camera: {tracklet: [relpath under DATA, ...]}}}}``),
    ``{train,query,gallery}.txt`` with ``pid modality camera tracklet`` rows
    (modality ``RGB``, ``IR`` or ``RGB/IR`` for a paired tracklet).  The
    auxiliary identities (``train_auxiliary.txt``) and the generated
    ``FakeIR`` images are not used, as in L2RW+.  Cameras LS3, G25, CQ1, W4,
    TSG1, TSG2 are camids 0-5.  Query = the infrared tracklets of
    ``query.txt``, gallery = the visible tracklets of ``gallery.txt``.  A
    tracklet's key is ``DATA/<pid>/<modality>/<camera>/<tracklet>``.
    Evaluation averages T = 10 frames per tracklet (the official setting).
``vi-folders`` (privreid's own; written by ``privreid data synth --vi``)
    ``{train,test}/{visible,infrared}/c<cam>/<pid>/`` holding images (image
    data) or one folder of frames per tracklet (video).  Query = ``test/infrared``,
    gallery = ``test/visible``; whole gallery, image CMC; T = 6 frames per
    tracklet.

Visible-to-infrared evaluation swaps query and gallery
(:func:`privreid.evaluation.cross_modality.mode_split`).  For BUPTCampus
that is not its own visible-to-infrared split (query.txt's visible against
gallery.txt's infrared tracklets), which L2RW+ does not use.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from privreid.data.formats.base import DETECT_FIRST, IMAGE_SUFFIXES, DatasetFormat, check_ids, check_root, \
    make_dataset, subfolder
from privreid.data.types import INFRARED, VISIBLE, ReIDDataset, Sample, VIProtocol
from privreid.errors import ConfigError, DataError

__all__ = [
    "VI_DATASET_FORMATS",
    "VI_FORMATS",
    "detect_vi_format",
    "frame_dataset",
    "is_vi_format",
    "load_buptcampus",
    "load_hitsz_vcm",
    "load_llcm",
    "load_regdb",
    "load_sysu_mm01",
    "load_vi_dataset",
    "load_vi_folders",
]

VI_FORMATS: dict[str, str] = {
    "sysu-mm01": "root/cam{1..6}/<pid:04d>/*.jpg + root/exp/{train,val,test}_id.txt; all-search "
                 "(the folders may sit in root/SYSU-MM01/)",
    "sysu-mm01-indoor": "SYSU-MM01 (same layout), indoor-search: visible gallery of cameras 1-2",
    "regdb": "root/idx/{train,test}_{visible,thermal}_<trial>.txt with '<relpath> <label>' lines; trial 1 "
             "('regdb-<n>' for trial n of 1-10; the files may sit in root/RegDB/)",
    "llcm": "root/idx/train_{vis,nir}.txt + root/idx/test_id.txt + root/test_{vis,nir}/cam<k>/<pid:04d>/*.jpg "
            "(the folders may sit in root/LLCM/)",
    "hitsz-vcm": "video: root/info/{train_name,test_name,track_train_info,track_test_info,query_IDX}.txt + "
                 "frames root/{Train,Test}/<pid>/<ir|rgb>/<D..>/*.jpg",
    "buptcampus": "video: root/DATA/<pid>/{RGB,IR}/<camera>/*.jpg + root/data_paths.json + "
                  "root/{train,query,gallery}.txt",
    "vi-folders": "root/{train,test}/{visible,infrared}/c<cam>/<pid>/ holding images, or one folder of "
                  "frames per tracklet (privreid data synth --vi / --video)",
}

#: SYSU-MM01: camera number -> modality
_SYSU_CAMERAS = {1: VISIBLE, 2: VISIBLE, 3: INFRARED, 4: VISIBLE, 5: VISIBLE, 6: INFRARED}
_SYSU_GALLERY = {"all": (1, 2, 4, 5), "indoor": (1, 2)}
#: the released evaluation code of SYSU-MM01 and LLCM: 10 single-shot trials, CMC over identities
_SYSU_PROTOCOL = VIProtocol(gallery_trials=10, cmc_by_identity=True, colocated_cameras=((1, 2),))
_LLCM_PROTOCOL = VIProtocol(gallery_trials=10, cmc_by_identity=True)
#: video: whole gallery, image CMC, tracklet features averaged over T frames (L2RW+ Sec. IV-B)
_VCM_PROTOCOL = VIProtocol(seq_len=6)
_BUPT_PROTOCOL = VIProtocol(seq_len=10)
_REGDB_TRIALS = range(1, 11)
_VCM_MODALITIES = {1: (INFRARED, "ir"), 2: (VISIBLE, "rgb")}
_VCM_NAME = re.compile(r"(\d{4})M(\d)(D\d+)T(\d+)F(.+)")
_BUPT_CAMERAS = {"LS3": 0, "G25": 1, "CQ1": 2, "W4": 3, "TSG1": 4, "TSG2": 5}
_BUPT_MODALITIES = {"RGB": VISIBLE, "IR": INFRARED}
_FOLDER_MODALITIES = (VISIBLE, INFRARED)


def is_vi_format(fmt: str) -> bool:
    """Whether ``fmt`` names a VI format (a key of :data:`VI_FORMATS` or ``regdb-<trial>``)."""
    return fmt in VI_FORMATS or re.fullmatch(r"regdb-\d+", fmt) is not None


def load_vi_dataset(root: str | os.PathLike, fmt: str) -> ReIDDataset:
    """Load ``root`` in VI format ``fmt`` (see :func:`is_vi_format`)."""
    if fmt in ("sysu-mm01", "sysu-mm01-indoor"):
        return load_sysu_mm01(root, "indoor" if fmt.endswith("indoor") else "all")
    if fmt == "regdb" or fmt.startswith("regdb-"):
        trial = fmt.partition("-")[2]
        if trial and not trial.isdigit():
            raise ConfigError(f"unknown VI format {fmt!r}; RegDB trials are regdb-1 .. regdb-10")
        return load_regdb(root, int(trial or 1))
    loaders: dict[str, Callable[[str | os.PathLike], ReIDDataset]] = {
        "llcm": load_llcm, "hitsz-vcm": load_hitsz_vcm, "buptcampus": load_buptcampus, "vi-folders": load_vi_folders,
    }
    if fmt not in loaders:
        raise ConfigError(f"unknown VI format {fmt!r}; choose one of: {', '.join(VI_FORMATS)}, regdb-<trial>")
    return loaders[fmt](root)


def detect_vi_format(root: str | os.PathLike) -> str | None:
    """The VI format whose layout ``root`` follows (SYSU-MM01 as all-search, RegDB as trial 1), or None."""
    root = Path(root).expanduser()
    if not root.is_dir():
        return None
    for fmt in VI_DATASET_FORMATS:
        if fmt.detect is not None and fmt.detect(root):
            return fmt.name
    return None


def frame_dataset(ds: ReIDDataset) -> ReIDDataset:
    """A video dataset with every tracklet expanded into its frames (one sample per frame), e.g. to verify files."""
    if ds.tracklets is None:
        return ds

    def frames(samples: list[Sample]) -> list[Sample]:
        return [(frame, pid, cam) for key, pid, cam in samples for frame in ds.tracklets[key]]

    return ReIDDataset(ds.name, frames(ds.train), frames(ds.query), frames(ds.gallery), root=ds.root)


# --------------------------------------------------------------------------- image datasets


def load_sysu_mm01(root: str | os.PathLike, mode: str = "all") -> ReIDDataset:
    """SYSU-MM01, ``mode`` ``"all"`` (all-search) or ``"indoor"`` (indoor-search); see the module docstring."""
    if mode not in _SYSU_GALLERY:
        raise ConfigError(f"SYSU-MM01 mode must be 'all' or 'indoor', got {mode!r}")
    base = subfolder(check_root(root), ("SYSU-MM01",))
    train_ids = _read_ids(base / "exp" / "train_id.txt") + _read_ids(base / "exp" / "val_id.txt")
    test_ids = _read_ids(base / "exp" / "test_id.txt")
    modality: dict[str, str] = {}

    def images(ids: list[int], cams: Iterable[int]) -> list[Sample]:
        folders = [(base / f"cam{cam}", cam - 1, _SYSU_CAMERAS[cam]) for cam in cams]
        return _walk_identity_folders(folders, ids, modality)

    train = images(train_ids, _SYSU_CAMERAS)
    query = images(test_ids, [cam for cam, m in _SYSU_CAMERAS.items() if m == INFRARED])
    gallery = images(test_ids, _SYSU_GALLERY[mode])
    name = "sysu-mm01" if mode == "all" else "sysu-mm01-indoor"
    return _vi_dataset(name, base, train, query, gallery, modality, _SYSU_PROTOCOL)


def load_regdb(root: str | os.PathLike, trial: int = 1) -> ReIDDataset:
    """RegDB trial ``trial`` (1-10): thermal query, visible gallery; see the module docstring."""
    if trial not in _REGDB_TRIALS:
        raise ConfigError(f"RegDB trial must be in 1..10, got {trial}")
    base = subfolder(check_root(root), ("RegDB",))
    modality: dict[str, str] = {}

    def listed(split: str, kind: str, camid: int, mod: str) -> list[Sample]:
        return _read_label_list(base, base / "idx" / f"{split}_{kind}_{trial}.txt", lambda rel: camid, mod, modality)

    train = listed("train", "visible", 0, VISIBLE) + listed("train", "thermal", 1, INFRARED)
    query = listed("test", "thermal", 1, INFRARED)
    gallery = listed("test", "visible", 0, VISIBLE)
    return _vi_dataset("regdb" if trial == 1 else f"regdb-{trial}", base, train, query, gallery, modality,
                       VIProtocol())


def load_llcm(root: str | os.PathLike) -> ReIDDataset:
    """LLCM: infrared (NIR) query, visible gallery, 10 single-shot trials; see the module docstring."""
    base = subfolder(check_root(root), ("LLCM",))
    modality: dict[str, str] = {}

    def camid(rel: str) -> int:
        found = re.search(r"(?:^|/)cam(\d+)/", rel)
        if found is None:
            raise DataError(f"LLCM list entry {rel!r} has no cam<k>/ folder to take the camera from")
        return int(found.group(1)) - 1

    train = (_read_label_list(base, base / "idx" / "train_vis.txt", camid, VISIBLE, modality)
             + _read_label_list(base, base / "idx" / "train_nir.txt", camid, INFRARED, modality))
    test_ids = _read_ids(base / "idx" / "test_id.txt")

    def test(folder: str, mod: str) -> list[Sample]:
        cams = sorted((p for p in (base / folder).glob("cam*") if re.fullmatch(r"cam\d+", p.name)),
                      key=lambda p: int(p.name[3:]))
        if not cams:
            raise DataError(f"missing split folder {base / folder} (expected cam<k>/<pid>/ folders)")
        return _walk_identity_folders([(p, int(p.name[3:]) - 1, mod) for p in cams], test_ids, modality)

    query, gallery = test("test_nir", INFRARED), test("test_vis", VISIBLE)
    return _vi_dataset("llcm", base, train, query, gallery, modality, _LLCM_PROTOCOL)


# --------------------------------------------------------------------------- video datasets


def load_hitsz_vcm(root: str | os.PathLike, min_seq_len: int = 12) -> ReIDDataset:
    """HITSZ-VCM tracklets (video); see the module docstring."""
    base = check_root(root)
    info = subfolder(base, ("info",))
    modality: dict[str, str] = {}
    tracklets: dict[str, list[str]] = {}

    def rows(split: str, folder: str) -> list[tuple[int, Sample]]:
        names = _read_lines(info / f"{split}_name.txt")
        image_root = subfolder(base, (folder,))
        out = []
        for row, fields in enumerate(_read_int_rows(info / f"track_{split}_info.txt", 5), start=1):
            m, start, end, pid, cam = fields
            if m not in _VCM_MODALITIES or not 1 <= start <= end <= len(names):
                raise DataError(f"{info / f'track_{split}_info.txt'}:{row}: expected 'modality(1|2) start end pid "
                                f"camera' with 1 <= start <= end <= {len(names)}, got {fields}")
            check_ids(info / f"track_{split}_info.txt", pid, cam)
            if end - start + 1 < min_seq_len:
                continue
            mod, folder_name = _VCM_MODALITIES[m]
            frames = [str(image_root / _vcm_frame_path(name, folder_name)) for name in names[start - 1:end]]
            key = str(Path(frames[0]).parent / f"tracklet{row:05d}")
            tracklets[key], modality[key] = frames, mod
            out.append((row, (key, pid, cam - 1)))
        return out

    train = [sample for _, sample in rows("train", "Train")]
    test = rows("test", "Test")
    queries = set(_read_int_tokens(info / "query_IDX.txt"))
    query = [s for row, s in test if row in queries and modality[s[0]] == INFRARED]
    gallery = [s for row, s in test if row not in queries and modality[s[0]] == VISIBLE]
    ds = _vi_dataset("hitsz-vcm", base, train, query, gallery, modality, _VCM_PROTOCOL)
    ds.tracklets = tracklets
    return ds


def load_buptcampus(root: str | os.PathLike) -> ReIDDataset:
    """BUPTCampus tracklets (video), without the auxiliary identities; see the module docstring."""
    base = subfolder(check_root(root), ("BUPTCampus",))
    info_path = base / "data_paths.json"
    try:
        info = json.loads(info_path.read_text())
    except FileNotFoundError:
        raise DataError(f"missing {info_path}") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read {info_path}: {exc}") from exc
    data = base / "DATA"
    modality: dict[str, str] = {}
    tracklets: dict[str, list[str]] = {}

    def listed(split: str, keep: str | None = None) -> list[Sample]:
        path = base / f"{split}.txt"
        out = []
        for lineno, fields in enumerate(_read_rows(path), start=1):
            if len(fields) != 4 or not fields[0].isdigit() or fields[2] not in _BUPT_CAMERAS:
                raise DataError(f"{path}:{lineno}: expected 'pid RGB|IR|RGB/IR camera tracklet' with a camera "
                                f"in {', '.join(_BUPT_CAMERAS)}, got {' '.join(fields)!r}")
            pid, mods, cam, tid = fields
            for mod in mods.split("/"):
                if mod not in _BUPT_MODALITIES:
                    raise DataError(f"{path}:{lineno}: unknown modality {mod!r} (expected RGB, IR or RGB/IR)")
                if keep is not None and _BUPT_MODALITIES[mod] != keep:
                    continue
                try:
                    rels = info[pid][mod][cam][tid]
                except (KeyError, TypeError):
                    raise DataError(f"{path}:{lineno}: tracklet {pid}/{mod}/{cam}/{tid} is not in {info_path}") from None
                key = str(data / pid / mod / cam / tid)
                tracklets[key] = [str(data / rel) for rel in rels]
                modality[key] = _BUPT_MODALITIES[mod]
                out.append((key, int(pid), _BUPT_CAMERAS[cam]))
        return out

    ds = _vi_dataset("buptcampus", base, listed("train"), listed("query", INFRARED), listed("gallery", VISIBLE),
                     modality, _BUPT_PROTOCOL)
    ds.tracklets = tracklets
    return ds


def load_vi_folders(root: str | os.PathLike) -> ReIDDataset:
    """privreid's ``vi-folders`` layout (images or tracklet folders); see the module docstring."""
    base = check_root(root)
    modality: dict[str, str] = {}
    tracklets: dict[str, list[str]] = {}

    def read(split: str, modalities: Iterable[str]) -> list[Sample]:
        if not (base / split).is_dir():
            raise DataError(f"missing split folder {base / split}")
        out = []
        for mod in modalities:
            for cam_dir in _sorted_dirs(base / split / mod):
                if re.fullmatch(r"c\d+", cam_dir.name) is None:
                    raise DataError(f"folder {cam_dir} should be named c<camera number>")
                cam = int(cam_dir.name[1:])
                for pid_dir in _sorted_dirs(cam_dir):
                    if not pid_dir.name.isdigit():
                        raise DataError(f"folder {pid_dir} should be named by the identity number")
                    pid = int(pid_dir.name)
                    check_ids(pid_dir, pid, cam)
                    for path, frames in _shots(pid_dir):
                        if frames is not None:
                            tracklets[path] = frames
                        modality[path] = mod
                        out.append((path, pid, cam - 1))
        return out

    train = read("train", _FOLDER_MODALITIES)
    query, gallery = read("test", (INFRARED,)), read("test", (VISIBLE,))
    if tracklets and len(tracklets) != len(modality):
        raise DataError(f"{base} mixes image files and tracklet folders; use one or the other")
    ds = _vi_dataset("vi-folders", base, train, query, gallery, modality, VIProtocol())
    ds.tracklets = tracklets or None
    return ds


# --------------------------------------------------------------------------- helpers


def _vi_dataset(name: str, base: Path, train: list[Sample], query: list[Sample], gallery: list[Sample],
                modality: dict[str, str], protocol: VIProtocol) -> ReIDDataset:
    ds = make_dataset(name, base, train=train, query=query, gallery=gallery)
    ds.modality, ds.vi_protocol = modality, protocol
    return ds


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise DataError(f"missing list file {path}")
    with open(path, encoding="utf-8") as fh:
        return [line.strip() for line in fh if line.strip()]


def _read_rows(path: Path) -> list[list[str]]:
    return [line.split() for line in _read_lines(path)]


def _read_int_tokens(path: Path) -> list[int]:
    tokens = [t for line in _read_lines(path) for t in re.split(r"[,\s]+", line) if t]
    bad = [t for t in tokens if not t.isdigit()]
    if bad:
        raise DataError(f"{path}: expected integers separated by commas or spaces, got {bad[0]!r}")
    return [int(t) for t in tokens]


def _read_ids(path: Path) -> list[int]:
    ids = _read_int_tokens(path)
    if not ids:
        raise DataError(f"{path} lists no identity")
    return ids


def _read_int_rows(path: Path, width: int) -> list[list[int]]:
    out = []
    for lineno, fields in enumerate(_read_rows(path), start=1):
        if len(fields) != width or not all(re.fullmatch(r"-?\d+", f) for f in fields):
            raise DataError(f"{path}:{lineno}: expected {width} integers, got {' '.join(fields)!r}")
        out.append([int(f) for f in fields])
    return out


def _read_label_list(base: Path, path: Path, camid: Callable[[str], int], mod: str,
                     modality: dict[str, str]) -> list[Sample]:
    """``<relpath> <label>`` lines (RegDB / LLCM ``idx`` files); images are ``base / relpath``."""
    out = []
    for lineno, fields in enumerate(_read_rows(path), start=1):
        if len(fields) != 2 or not re.fullmatch(r"-?\d+", fields[1]):
            raise DataError(f"{path}:{lineno}: expected '<relpath> <label>', got {' '.join(fields)!r}")
        image = str(base / fields[0])
        cam = camid(fields[0])
        check_ids(Path(image), int(fields[1]), cam + 1)
        modality[image] = mod
        out.append((image, int(fields[1]), cam))
    return out


def _walk_identity_folders(folders: list[tuple[Path, int, str]], ids: list[int],
                           modality: dict[str, str]) -> list[Sample]:
    """Images of ``<folder>/<pid:04d>/*`` for each (folder, camid, modality) and listed identity (missing = unseen)."""
    out = []
    for pid in sorted(ids):
        for folder, cam, mod in folders:
            pid_dir = folder / f"{pid:04d}"
            if not pid_dir.is_dir():
                continue
            for path in sorted(pid_dir.iterdir()):
                if path.suffix.lower() in IMAGE_SUFFIXES:
                    modality[str(path)] = mod
                    out.append((str(path), pid, cam))
    return out


def _vcm_frame_path(name: str, modality_folder: str) -> str:
    """``0001M1D1T0001F001.jpg`` -> ``0001/ir/D1/001.jpg`` (the released loader's ``decoder_pic_path``)."""
    found = _VCM_NAME.fullmatch(name)
    if found is None:
        raise DataError(f"HITSZ-VCM frame name {name!r} does not follow <pid>M<modality>D<camera>T<tracklet>F<frame>")
    pid, _, camera, _, frame = found.groups()
    return f"{pid}/{modality_folder}/{camera}/{frame}"


def _sorted_dirs(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir())


def _shots(pid_dir: Path) -> list[tuple[str, list[str] | None]]:
    """The images of an identity folder (frames None), or its tracklet folders with their sorted frames."""
    images = sorted(str(p) for p in pid_dir.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    folders = _sorted_dirs(pid_dir)
    if images and folders:
        raise DataError(f"{pid_dir} mixes image files and tracklet folders; use one or the other")
    out: list[tuple[str, list[str] | None]] = [(path, None) for path in images]
    for folder in folders:
        frames = sorted(str(p) for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not frames:
            raise DataError(f"tracklet folder {folder} holds no image")
        out.append((str(folder), frames))
    return out


# --------------------------------------------------------------------------- the registry entries


def _marker(folder: str, *rel: str) -> Callable[[Path], bool]:
    """Detection by a marker file ``root[/<folder>]/<rel...>`` (the release's top folder is optional)."""
    return lambda root: subfolder(root, (folder,)).joinpath(*rel).is_file()


def _load_regdb_variant(root: Path, variant: str | None) -> ReIDDataset:
    return load_regdb(root, int(variant or 1))


def _has_folder_modalities(root: Path) -> bool:
    return any((root / "train" / modality).is_dir() for modality in _FOLDER_MODALITIES)


#: the VI formats as registry entries (:mod:`privreid.data.formats`), in the order ``auto`` tries them;
#: ``sysu-mm01-indoor`` is only chosen by name (auto-detection reads SYSU-MM01 as all-search)
VI_DATASET_FORMATS: tuple[DatasetFormat, ...] = (
    DatasetFormat("sysu-mm01", VI_FORMATS["sysu-mm01"], _marker("SYSU-MM01", "exp", "test_id.txt"),
                  lambda root, variant=None: load_sysu_mm01(root, "all"), priority=DETECT_FIRST, family="vi"),
    DatasetFormat("sysu-mm01-indoor", VI_FORMATS["sysu-mm01-indoor"], None,
                  lambda root, variant=None: load_sysu_mm01(root, "indoor"), family="vi"),
    DatasetFormat("regdb", VI_FORMATS["regdb"], _marker("RegDB", "idx", "train_visible_1.txt"), _load_regdb_variant,
                  priority=DETECT_FIRST + 1, family="vi", variant_pattern=r"\d+", variant_doc="<trial>"),
    DatasetFormat("llcm", VI_FORMATS["llcm"], _marker("LLCM", "idx", "train_vis.txt"),
                  lambda root, variant=None: load_llcm(root), priority=DETECT_FIRST + 2, family="vi"),
    DatasetFormat("hitsz-vcm", VI_FORMATS["hitsz-vcm"], _marker("info", "track_train_info.txt"),
                  lambda root, variant=None: load_hitsz_vcm(root), priority=DETECT_FIRST + 3, family="video"),
    DatasetFormat("buptcampus", VI_FORMATS["buptcampus"], _marker("BUPTCampus", "data_paths.json"),
                  lambda root, variant=None: load_buptcampus(root), priority=DETECT_FIRST + 4, family="video"),
    DatasetFormat("vi-folders", VI_FORMATS["vi-folders"], _has_folder_modalities,
                  lambda root, variant=None: load_vi_folders(root), priority=DETECT_FIRST + 5, family="vi"),
)
