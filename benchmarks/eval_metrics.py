"""Benchmark privreid's ReID evaluator against a full-sort evaluator.

For each scale and feature dimension this script generates a synthetic,
clustered ReID problem (identities with a few images each, seen by several
cameras; pid-0 distractors at Market-1501 scale), saves it to a temporary
directory, and times three approaches, each in a fresh subprocess so that
their peak RSS (``VmHWM``) can be told apart:

``privreid``
    :func:`privreid.evaluation.evaluate` (chunked, ranks of positives only).
``fullsort``
    What torchreid's evaluator does: the full ``Q x G`` distance matrix
    (torch, as torchreid's ``compute_distance_matrix``), ``np.argsort`` of
    every row, ``matches = g_pids[indices] == q_pids[:, None]``, then a loop
    over queries as in torchreid's ``eval_market1501``, with the per-query AP
    vectorised in numpy (torchreid's pure-Python path builds it with a
    list comprehension, which is far slower; its Cython path has the same
    sort and matrices as here).  It needs about 24 bytes per distance, so it
    is skipped above ``--skip-fullsort-above`` distances (MSMT17 by default).
``matmul``
    The distance matrix product alone, in the same query chunks as privreid,
    with no ranking: the floor for any exact evaluator.

The privreid and fullsort metrics are compared.  Results are printed as a
table at the end and optionally written as JSON.

    python benchmarks/eval_metrics.py                       # full run
    python benchmarks/eval_metrics.py --quick               # smoke run
    python benchmarks/eval_metrics.py --scales market --dims 512 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

# Run from a checkout without installing privreid.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (num_query, num_gallery, num_ids, num_cams, num_gallery_distractors)
SCALES = {
    "market": (3368, 15913, 751, 6, 2793),
    "msmt": (11659, 82161, 3060, 15, 0),
}
QUICK_DIVISOR = 16
APPROACHES = ("privreid", "fullsort", "matmul")
MAX_RANK = 50
BYTES_PER_FULLSORT_ENTRY = 24  # float32 distances + int64 indices + int64 gather + int32 matches


# --------------------------------------------------------------------------
# Synthetic data


def make_problem(scale: str, dim: int, quick: bool, seed: int, spread: float,
                 out_dir: str) -> dict:
    """Write a clustered ReID problem as .npy files; return its description.

    Each identity has a random centre; an image's feature is its identity's
    centre plus a per-camera offset plus unit isotropic noise.  Centres are
    drawn with standard deviation ``spread * dim ** -0.25`` (camera offsets
    with half that), which keeps the difficulty similar across dimensions:
    with the default ``spread`` of 3, mAP is about 0.4 at Market-1501 scale
    and 0.9 at MSMT17 scale.  ``spread = 0`` gives unstructured features (an
    untrained model: positives scattered over the whole ranking).
    Distractors (pid 0) are pure noise.
    """
    num_q, num_g, num_ids, num_cams, num_distract = SCALES[scale]
    if quick:
        num_q, num_g = num_q // QUICK_DIVISOR, num_g // QUICK_DIVISOR
        num_ids, num_distract = num_ids // QUICK_DIVISOR, num_distract // QUICK_DIVISOR
    rng = np.random.default_rng(seed)
    spread = spread * dim ** -0.25
    centres = (spread * rng.standard_normal((num_ids + 1, dim))).astype(np.float32)
    centres[0] = 0.0
    cam_offsets = (0.5 * spread * rng.standard_normal((num_cams, dim))).astype(np.float32)

    ids = np.arange(1, num_ids + 1)
    g_pids = np.concatenate([
        np.zeros(num_distract, dtype=np.int64),
        ids,  # every identity appears in the gallery
        rng.choice(ids, size=num_g - num_distract - num_ids),
    ])
    q_pids = rng.choice(ids, size=num_q)
    g_camids = rng.integers(0, num_cams, size=num_g)
    q_camids = rng.integers(0, num_cams, size=num_q)

    def features(pids, camids):
        out = np.empty((len(pids), dim), dtype=np.float32)
        for s in range(0, len(pids), 4096):
            p, c = pids[s:s + 4096], camids[s:s + 4096]
            block = rng.standard_normal((len(p), dim), dtype=np.float32)
            block += centres[p] + cam_offsets[c] * (p > 0)[:, None]
            out[s:s + 4096] = block
        return out

    arrays = {
        "qf": features(q_pids, q_camids), "gf": features(g_pids, g_camids),
        "q_pids": q_pids, "g_pids": g_pids, "q_camids": q_camids, "g_camids": g_camids,
    }
    for name, a in arrays.items():
        np.save(os.path.join(out_dir, f"{name}.npy"), a)
    return {"scale": scale, "dim": dim, "num_query": num_q, "num_gallery": num_g}


# --------------------------------------------------------------------------
# Child process: one approach on one problem


def _rss_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"{field} not found in /proc/self/status")


def _fullsort(qf, gf, q_pids, g_pids, q_camids, g_camids, metric):
    """torchreid-style evaluation: full distance matrix and argsort."""
    import torch
    import torch.nn.functional as F

    if metric == "euclidean":
        m, n = len(qf), len(gf)
        distmat = (qf.pow(2).sum(dim=1, keepdim=True).expand(m, n)
                   + gf.pow(2).sum(dim=1, keepdim=True).expand(n, m).t())
        distmat.addmm_(qf, gf.t(), beta=1, alpha=-2)
    else:
        distmat = 1 - torch.mm(F.normalize(qf, p=2, dim=1), F.normalize(gf, p=2, dim=1).t())
    distmat = distmat.numpy()
    indices = np.argsort(distmat, axis=1)
    matches = (g_pids[indices] == q_pids[:, np.newaxis]).astype(np.int32)
    all_cmc, all_ap, all_inp = [], [], []
    for q_idx in range(len(q_pids)):
        order = indices[q_idx]
        remove = (g_pids[order] == q_pids[q_idx]) & (g_camids[order] == q_camids[q_idx])
        raw_cmc = matches[q_idx][np.invert(remove)]
        if not np.any(raw_cmc):
            continue
        cmc = raw_cmc.cumsum()
        last = np.flatnonzero(raw_cmc)[-1]
        all_inp.append(cmc[last] / (last + 1.0))
        all_ap.append((cmc / np.arange(1.0, len(cmc) + 1) * raw_cmc).sum() / raw_cmc.sum())
        cmc[cmc > 1] = 1
        all_cmc.append(cmc[:MAX_RANK])
    cmc = np.asarray(all_cmc, dtype=np.float32).sum(0) / len(all_cmc)
    return {"cmc": cmc, "mAP": float(np.mean(all_ap)), "mINP": float(np.mean(all_inp)),
            "num_valid_queries": len(all_cmc)}


def _matmul(qf, gf, metric):
    """The chunked distance product privreid performs, without ranking."""
    import torch

    from privreid.evaluation.metrics import _CHUNK_ELEMENTS, _squared_norms

    rows = max(1, _CHUNK_ELEMENTS // len(gf))
    out = torch.empty(rows, len(gf))
    g_sq = _squared_norms(gf)
    g_scale = g_sq if metric == "euclidean" else 1.0 / g_sq.sqrt().clamp_min(1e-12)
    q_sq = _squared_norms(qf)
    q_scale = (torch.full_like(q_sq, -2.0) if metric == "euclidean"
               else -1.0 / q_sq.sqrt().clamp_min(1e-12))[:, None]
    for s in range(0, len(qf), rows):
        qc = qf[s:s + rows] * q_scale[s:s + rows]
        d = out[:len(qc)]
        if metric == "euclidean":
            torch.addmm(g_scale, qc, gf.T, out=d)
        else:
            torch.mm(qc, gf.T, out=d)
            d.mul_(g_scale)
    return {}


def run_child(approach: str, data_dir: str, metric: str) -> None:
    import torch

    from privreid.evaluation import evaluate

    # Warm up MKL / OpenMP on a tiny problem so start-up is not timed.
    tiny = torch.randn(8, 16)
    evaluate(tiny, tiny, np.arange(8) % 2 + 1, np.arange(8) % 2 + 1,
             np.zeros(8, int), np.ones(8, int), metric=metric)

    a = {name: np.load(os.path.join(data_dir, f"{name}.npy"))
         for name in ("qf", "gf", "q_pids", "g_pids", "q_camids", "g_camids")}
    qf, gf = torch.from_numpy(a["qf"]), torch.from_numpy(a["gf"])
    ids = (a["q_pids"], a["g_pids"], a["q_camids"], a["g_camids"])
    base = _rss_mb("VmRSS")
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    if approach == "privreid":
        result = evaluate(qf, gf, *ids, metric=metric, max_rank=MAX_RANK)
    elif approach == "fullsort":
        result = _fullsort(qf, gf, *ids, metric=metric)
    else:
        result = _matmul(qf, gf, metric)
    seconds = time.perf_counter() - start
    cpu_end = resource.getrusage(resource.RUSAGE_SELF)
    cpu_seconds = (cpu_end.ru_utime - cpu.ru_utime) + (cpu_end.ru_stime - cpu.ru_stime)
    metrics = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in result.items()}
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss_mb": _rss_mb("VmHWM"),
                      "base_rss_mb": base, "threads": torch.get_num_threads(), "metrics": metrics}))


# --------------------------------------------------------------------------
# Parent


def run_approach(approach: str, data_dir: str, metric: str) -> dict:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", approach,
         "--data", data_dir, "--metric", metric],
        capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{approach} child failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(a: dict, b: dict) -> float:
    """Largest absolute difference between two metric dicts."""
    diffs = [abs(a[k] - b[k]) for k in ("mAP", "mINP")]
    diffs.append(float(np.max(np.abs(np.asarray(a["cmc"]) - np.asarray(b["cmc"])))))
    return max(diffs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scales", default="market,msmt", help="comma list of: " + ",".join(SCALES))
    p.add_argument("--dims", default="512,2048", help="comma list of feature dimensions")
    p.add_argument("--metric", default="euclidean", choices=("euclidean", "cosine"))
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: every scale divided by {QUICK_DIVISOR}")
    p.add_argument("--skip-fullsort-above", type=float, default=2.5e8, metavar="N",
                   help="skip the full-sort approach when Q*G exceeds N distances "
                        "(default 2.5e8: runs Market-1501, skips MSMT17)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--spread", type=float, default=3.0,
                   help="identity-centre spread; 0 = unstructured features (worst case)")
    p.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    p.add_argument("--child", choices=APPROACHES, help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        run_child(args.child, args.data, args.metric)
        return 0

    scales = [s.strip() for s in args.scales.split(",") if s.strip()]
    unknown = [s for s in scales if s not in SCALES]
    if unknown:
        p.error(f"unknown scale(s) {unknown}; choose from {list(SCALES)}")
    dims = [int(d) for d in args.dims.split(",")]

    import torch

    rows = []
    for scale in scales:
        for dim in dims:
            with tempfile.TemporaryDirectory(prefix="privreid-bench-") as tmp:
                info = make_problem(scale, dim, args.quick, args.seed, args.spread, tmp)
                entries = info["num_query"] * info["num_gallery"]
                row = dict(info, metric=args.metric)
                print(f"[{scale} {dim}-d] {info['num_query']} x {info['num_gallery']}", flush=True)
                for approach in APPROACHES:
                    if approach == "fullsort" and entries > args.skip_fullsort_above:
                        need = entries * BYTES_PER_FULLSORT_ENTRY / 2**30
                        row[approach] = {"skipped": (
                            f"Q*G = {entries:.3g} > --skip-fullsort-above {args.skip_fullsort_above:.3g} "
                            f"(would need about {need:.0f} GiB)")}
                        print(f"  {approach:9s} skipped: {row[approach]['skipped']}", flush=True)
                        continue
                    r = run_approach(approach, tmp, args.metric)
                    row[approach] = r
                    print(f"  {approach:9s} {r['seconds']:8.2f} s wall {r['cpu_seconds']:8.2f} s CPU  peak RSS {r['peak_rss_mb']:8.0f} MB"
                          f"  (+{r['peak_rss_mb'] - r['base_rss_mb']:.0f} MB over loaded data), "
                          f"{r['threads']} thread(s)",
                          flush=True)
            pr, fs, mm = row["privreid"], row["fullsort"], row["matmul"]
            row["privreid_over_matmul"] = pr["seconds"] / mm["seconds"]
            row["privreid_over_matmul_cpu"] = pr["cpu_seconds"] / mm["cpu_seconds"]
            if "seconds" in fs:
                row["fullsort_over_privreid"] = fs["seconds"] / pr["seconds"]
                row["fullsort_over_privreid_cpu"] = fs["cpu_seconds"] / pr["cpu_seconds"]
                row["max_metric_diff"] = compare(pr["metrics"], fs["metrics"])
            rows.append(row)

    print_table(rows)
    if args.json:
        env = {"python": platform.python_version(), "torch": torch.__version__,
               "numpy": np.__version__, "torch_threads": torch.get_num_threads(),
               "cpu_count": os.cpu_count(), "load_average": os.getloadavg(),
               "quick": args.quick, "spread": args.spread, "metric": args.metric}
        with open(args.json, "w") as f:
            json.dump({"environment": env, "results": rows}, f, indent=2)
        print(f"wrote {args.json}")
    return 0


def print_table(rows) -> None:
    header = (f"{'scale':6s} {'dim':>4s} {'Q x G':>12s} | {'privreid':>20s} | {'fullsort':>20s} | "
              f"{'matmul':>20s} | {'full/priv':>11s} | {'priv/mm':>11s} | {'mAP':>5s} {'R1':>5s} "
              f"{'max|diff|':>9s}")
    threads = sorted({row[a]["threads"] for row in rows for a in APPROACHES if "threads" in row[a]})
    print("\nwall s, CPU s, peak RSS MB per approach (each in a fresh process); "
          f"ratios as wall (CPU); torch threads: {', '.join(map(str, threads))} "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")
    print(header)
    print("-" * len(header))

    def cell(r):
        if "skipped" in r:
            return f"{'skipped':>20s}"
        return f"{r['seconds']:6.2f} {r['cpu_seconds']:6.2f} {r['peak_rss_mb']:6.0f}"

    def ratio(row, key):
        if key not in row:
            return f"{'-':>11s}"
        return f"{row[key]:4.1f}x ({row[key + '_cpu']:3.1f})"

    for row in rows:
        pm = row["privreid"]["metrics"]
        diff = row.get("max_metric_diff")
        print(f"{row['scale']:6s} {row['dim']:4d} {row['num_query']:>5d}x{row['num_gallery']:<6d} | "
              f"{cell(row['privreid'])} | {cell(row['fullsort'])} | {cell(row['matmul'])} | "
              f"{ratio(row, 'fullsort_over_privreid')} | {ratio(row, 'privreid_over_matmul')} | "
              f"{pm['mAP']:5.3f} {pm['rank1']:5.3f} {(f'{diff:.1e}' if diff is not None else '-'):>9s}")
    print("full/priv: fullsort time / privreid time; priv/mm: privreid time / matmul time; "
          "max|diff|: largest difference in mAP, mINP or CMC between privreid and fullsort.")


if __name__ == "__main__":
    sys.exit(main())
