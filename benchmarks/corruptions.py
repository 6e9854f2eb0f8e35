"""Throughput of privreid's batched corruptions against the ``imagecorruptions`` package.

CIL-ReID evaluates corruption robustness with ``imagecorruptions`` 1.1.2,
one PIL image at a time.  This script times, in the same process and on the
same synthetic pedestrian crops, at each image size:

``privreid``
    :func:`privreid.corruptions.corrupt` on batches of ``--batch`` images,
    every type at every severity (20 types).
``imagecorruptions``
    the package's function for the type, on each image (a PIL image in, as
    CIL-ReID calls it), every severity.

and prints images/s per type, the speed-up, and the whole suite's: the time
to put one image through every type once (the sum over the types both
implement) and its ratio.  One untimed warm-up call per type excludes
one-time costs (imports, privreid's frost textures, the zoom operators).

Times are the CPU time of this process by default (``--clock cpu``): the
benchmark machines are shared, and wall time there measures the other jobs
as much as the code.  ``--clock wall`` uses wall time.

The baseline needs two work-arounds, applied in this script only:

* ``imagecorruptions`` imports ``pkg_resources.resource_filename`` (for its
  frost photographs), and ``pkg_resources`` is gone from setuptools >= 81:
  a tiny shim module providing ``resource_filename`` is put in
  ``sys.modules`` before the import.
* ``glass_blur`` and ``gaussian_blur`` pass ``multichannel=`` to
  ``skimage.filters.gaussian`` (removed in scikit-image 0.19+) and ``fog``
  uses ``np.float_`` (removed in NumPy 2).  They fail, and are skipped and
  listed, unless ``--patch-baseline`` wraps ``gaussian`` to translate
  ``multichannel`` into ``channel_axis`` and defines ``np.float_``.  Glass
  blur is a per-pixel Python loop: expect seconds per image.

``rain`` is CIL-ReID's own (on albumentations), not in the package: it is
timed for privreid only.  Both sides run single-threaded by default
(``--threads``), as the package's numpy code does.

    python benchmarks/corruptions.py                    # default: 128x64 and 256x128, ~2-4 min on 2 cores
    python benchmarks/corruptions.py --quick            # smoke run
    python benchmarks/corruptions.py --patch-baseline --baseline-images 2 --json out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
import types

import numpy as np

# Run from a checkout without installing privreid.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SEVERITIES = (1, 2, 3, 4, 5)


# --------------------------------------------------------------------------- baseline set-up
def import_imagecorruptions(patch: bool):
    """Import ``imagecorruptions`` with the ``pkg_resources`` shim (and the compat patches if ``patch``)."""
    if importlib.util.find_spec("pkg_resources") is None:
        shim = types.ModuleType("pkg_resources")

        def resource_filename(package: str, name: str) -> str:
            return os.path.join(os.path.dirname(importlib.util.find_spec(package).origin), name)

        shim.resource_filename = resource_filename
        sys.modules["pkg_resources"] = shim
    import imagecorruptions
    import imagecorruptions.corruptions as ic

    if patch:
        from skimage.filters import gaussian

        def gaussian_compat(image, *args, multichannel=None, **kwargs):
            if multichannel:
                kwargs.setdefault("channel_axis", -1)
            return gaussian(image, *args, **kwargs)

        ic.gaussian = gaussian_compat
        if not hasattr(np, "float_"):
            np.float_ = np.float64
    return imagecorruptions


# --------------------------------------------------------------------------- data
def pedestrian_crops(height: int, width: int, count: int) -> np.ndarray:
    """``count`` synthetic pedestrian crops ``(N, H, W, 3)`` uint8 from privreid's generator."""
    from PIL import Image

    from privreid.data.synthetic import SynthConfig, generate_synthetic

    per_id = max(1, -(-count // 16))
    config = SynthConfig(num_domains=1, ids_per_domain=8, test_ids_per_domain=2, cams_per_domain=2,
                         images_per_id_per_cam=per_id, height=height, width=width, distractors=0, junk=0)
    with tempfile.TemporaryDirectory() as tmp:
        root = generate_synthetic(os.path.join(tmp, "synth"), config)
        files = sorted(str(p) for p in root.rglob("*.jpg"))[:count]
        return np.stack([np.asarray(Image.open(f).convert("RGB")) for f in files])


# --------------------------------------------------------------------------- timing
def time_privreid(images: np.ndarray, names: list[str], batch: int, seed: int, clock) -> dict[str, float]:
    """Seconds per image per type (mean over severities) for privreid's batched path."""
    import torch

    from privreid.corruptions import corrupt

    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(255)
    out = {}
    for name in names:
        for severity in SEVERITIES:  # warm-up (per-severity caches)
            corrupt(x[:2], name, severity, generator=seed)
        start = clock()
        done = 0
        for severity in SEVERITIES:
            for i in range(0, len(x), batch):
                chunk = x[i:i + batch]
                corrupt(chunk, name, severity, generator=seed + i)
                done += len(chunk)
        out[name] = (clock() - start) / done
    return out


def time_baseline(module, images: np.ndarray, names: list[str], clock) -> tuple[dict[str, float], dict[str, str]]:
    """Seconds per image per type for ``imagecorruptions`` (PIL image in), and the types that failed."""
    from PIL import Image

    out, failed = {}, {}
    for name in names:
        fn = module.corruption_dict.get(name)
        if fn is None:
            failed[name] = "not in the package"
            continue
        try:
            np.uint8(fn(Image.fromarray(images[0]), 1))  # warm-up
        except Exception as exc:  # the package is broken for some types on current libraries
            failed[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:70]}"
            continue
        start = clock()
        done = 0
        for severity in SEVERITIES:
            for img in images:
                np.uint8(fn(Image.fromarray(img), severity))
                done += 1
        out[name] = (clock() - start) / done
    return out, failed


def rate(seconds: float | None) -> str:
    return "-" if not seconds else f"{1 / seconds:,.0f}"


def report(size: str, ours: dict[str, float], base: dict[str, float], failed: dict[str, str]) -> tuple[str, dict]:
    """A Markdown table for one size, and its summary numbers."""
    lines = [f"### {size}", "",
             "| corruption | privreid img/s | imagecorruptions img/s | speed-up |",
             "|---|---:|---:|---:|"]
    for name, t in ours.items():
        b = base.get(name)
        lines.append(f"| {name} | {rate(t)} | {rate(b)} | {f'{b / t:.1f}x' if b else '-'} |")
    common = [n for n in ours if n in base]
    ours_common = sum(ours[n] for n in common)
    base_common = sum(base[n] for n in common)
    suite = {
        "common_types": common,
        "privreid_suite_img_per_s": 1 / sum(ours.values()),
        "privreid_common_suite_img_per_s": 1 / ours_common,
        "baseline_common_suite_img_per_s": 1 / base_common,
        "suite_speedup": base_common / ours_common,
        "geomean_speedup": float(np.exp(np.mean([np.log(base[n] / ours[n]) for n in common]))),
        "failed_baseline": failed,
    }
    lines += [f"| **suite, {len(common)} common types** | {suite['privreid_common_suite_img_per_s']:,.1f} | "
              f"{suite['baseline_common_suite_img_per_s']:,.1f} | **{suite['suite_speedup']:.1f}x** |",
              f"| suite, all {len(ours)} privreid types | {suite['privreid_suite_img_per_s']:,.1f} | - | - |",
              "",
              f"Geometric mean of the per-type speed-ups: {suite['geomean_speedup']:.1f}x.  "
              "A suite row is images/s for putting one image through every type once."]
    if failed:
        lines += ["", "Skipped on the baseline side: " + "; ".join(f"`{n}` ({why})" for n, why in failed.items())]
    return "\n".join(lines), suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="128x64,256x128", help="comma-separated HxW image sizes")
    parser.add_argument("--images", type=int, default=64, help="images per severity on the privreid side")
    parser.add_argument("--batch", type=int, default=16,
                        help="privreid batch size (16 ran fastest per image here: it stays in cache)")
    parser.add_argument("--baseline-images", type=int, default=6,
                        help="images per severity on the imagecorruptions side (it is slow)")
    parser.add_argument("--names", default="all", help="comma-separated corruption names, or 'all'")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (numpy runs single-threaded)")
    parser.add_argument("--patch-baseline", action="store_true",
                        help="make imagecorruptions' glass_blur, gaussian_blur and fog run (see the docstring)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="time with this process's CPU time (default) or wall time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: 128x64 only, 8 images, 1 baseline image")
    parser.add_argument("--json", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.images, args.baseline_images = "128x64", 8, 1

    import torch

    from privreid.corruptions import resolve_corruptions

    torch.set_num_threads(args.threads)
    names = resolve_corruptions(args.names.split(","))
    module = import_imagecorruptions(args.patch_baseline)
    print(f"# Corruption throughput: privreid (batch {args.batch}) vs imagecorruptions "
          f"{getattr(module, '__version__', '1.1.2')}\n")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{args.threads} torch thread(s); privreid {args.images} and imagecorruptions {args.baseline_images} "
          f"images per type and severity, severities 1-5; {args.clock} time.\n")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    results = {}
    for size in args.sizes.split(","):
        h, w = (int(v) for v in size.lower().split("x"))
        images = pedestrian_crops(h, w, max(args.images, args.baseline_images))
        ours = time_privreid(images[:args.images], names, args.batch, args.seed, clock)
        base, failed = time_baseline(module, images[:args.baseline_images], names, clock)
        table, suite = report(f"{h}x{w}", ours, base, failed)
        print(table + "\n", flush=True)
        results[f"{h}x{w}"] = {"privreid_s_per_img": ours, "baseline_s_per_img": base, **suite}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
