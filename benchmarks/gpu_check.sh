#!/usr/bin/env bash
# The prepared GPU check (issues 25 and 29), on the embedded synthetic federation (no dataset or ImageNet weight can
# be downloaded on the lent machine: --data synth --pretrained none; the figures are costs and plumbing, not paper
# accuracies).  It prints one table (and writes it to $OUT_DIR/table.md):
#   - ResNet-50 256x128 batch 32, privreid's local update against a raw torch loop, img/s at fp32, bf16 and fp16
#     (benchmarks/precision.py; cudnn.benchmark and channels-last batches on CUDA), and the peak GPU memory; then
#     at fp32 and bf16 with channels-last batches off, and with cudnn.benchmark off (what each switch buys); and at
#     batch 64 and 128 with the learning rate scaled linearly with the batch (0.05 x B / 32: Goyal et al. 2017's rule;
#     the rows state it), so a user sees what a larger batch buys before choosing it; and with --compile (privreid's
#     train.compile, the raw loop's forward and loss compiled alike) at batch 32 and 64, each row with the seconds
#     privreid / raw spent compiling (outside the timing; the CPU smoke compiles with aot_eager, no code generation);
#   - (issue 42, benchmarks/host_overhead.py) the host overhead per step of privreid's local update against a raw
#     loop on a model without arithmetic, evaluation features/s (ResNet-50 256x128, flip) and Inverting Gradients
#     iterations/s (ResNet-18 256x128), each privreid / a plain torch loop;
#   - seconds per FedPav round of 4 clients x 20 steps, sequential and with --parallel-clients 2 where privreid
#     has it (Flower's simulation engine; skipped without flwr/ray);
#   - one DP-SGD step (opacus), one secure-aggregation round (flwr) and 20 inversion iterations on the device, each
#     checked to run: "ok (N s)", "skipped (X not installed)" or "FAILED (log)"; the script exits 1 if one failed;
# then (issue 25) the first rounds of the FedPav and FedReID paper presets, one line each.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]    (on the GPU machine, < 8 min on one H100; OUT_DIR defaults to $OUT)
#   bash benchmarks/gpu_check.sh --cpu-smoke [OUT_DIR]    (everything tiny on the CPU: tests/test_gpu_check.py)
# Knobs: PYTHON (python3), ROUNDS (preset rounds, 3), PRESETS=0 skips the presets, EXTRA (more preset options),
# COMPILE_PRECISIONS (the --compile rows' precisions, fp32,bf16: each compile of ResNet-50 takes about a minute;
# fp32,bf16,fp16 adds two), COMPILE_BATCHES (32 64; empty: no --compile rows).
set -euo pipefail
SMOKE=0
if [[ "${1:-}" == "--cpu-smoke" ]]; then SMOKE=1; shift; fi
OUT_DIR=${1:-${OUT:-runs/gpu-check}}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if (( SMOKE )); then
  DEVICE=cpu ARCH=resnet18 H=64 W=32 BATCH=8 STEPS=2 BENCH="--steps 1 --repeats 1" INV_ITERS=2 ROUNDS=1 WORKERS=0
  PRECISIONS=fp32,bf16 SWITCH_PRECISIONS=fp32 EXTRA="--arch resnet18 --height 64 --width 32 --max-steps 1 ${EXTRA:-}"
  BATCHES="16" COMPILE_BATCHES="8" COMPILE_PRECISIONS=fp32 COMPILE_BACKEND=aot_eager HOST="--size 64x32 --inv-size 32x16 --batch 8 --steps 2 --repeats 1 --eval-images 16 --eval-batch 8 --inv-iterations 2"
else
  DEVICE=cuda ARCH=resnet50 H=256 W=128 BATCH=32 STEPS=20 BENCH="--steps 10 --repeats 3 --workers 4" INV_ITERS=20 WORKERS=2
  ROUNDS=${ROUNDS:-3} PRECISIONS=fp32,bf16,fp16 SWITCH_PRECISIONS=fp32,bf16 EXTRA=${EXTRA:-}
  BATCHES="64 128" COMPILE_BATCHES=${COMPILE_BATCHES-32 64} COMPILE_PRECISIONS=${COMPILE_PRECISIONS:-fp32,bf16} COMPILE_BACKEND=inductor HOST="--eval-arch resnet50 --inv-size 256x128 --steps 20 --repeats 3 --eval-images 512 --eval-batch 128 --inv-iterations 10"
fi
mkdir -p "$OUT_DIR"
ROWS="$OUT_DIR/rows.tsv"
: > "$ROWS"
FAILED=0
row() { printf '%s\t%s\n' "$1" "$2" >> "$ROWS"; }

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
} | tee "$OUT_DIR/device.txt"

# check NAME MODULES -- COMMAND...: run COMMAND (log in $OUT_DIR/NAME.log) unless a python module is missing
check() {
  local name=$1 modules=$2; shift 3
  local m
  for m in ${modules//,/ }; do
    if ! "$PY" -c "import $m" 2>/dev/null; then row "$name" "skipped ($m not installed)"; return 0; fi
  done
  local start end
  start=$(date +%s.%N)
  if "$@" > "$OUT_DIR/$name.log" 2>&1; then
    end=$(date +%s.%N)
    row "$name" "ok ($("$PY" -c "print(f'{$end - $start:.1f}')") s, process start included)"
  else
    row "$name" "FAILED (tail of $OUT_DIR/$name.log: $(tail -1 "$OUT_DIR/$name.log" | cut -c1-120))"
    FAILED=1
  fi
}

TINY=(--data synth --pretrained none --device "$DEVICE" --quiet --overwrite)
# 1. throughput at each precision, privreid against the raw loop, and the peak GPU memory; then with channels-last
#    batches, and with cuDNN's autotuner, turned off (each on in the first rows: privreid's default on CUDA)
# precision_run NAME LABEL ARGS...: benchmarks/precision.py with ARGS; its rows say LABEL after the precision
precision_run() {
  local name=$1 label=$2; shift 2
  # shellcheck disable=SC2086
  if "$PY" benchmarks/precision.py --device "$DEVICE" --arch "$ARCH" --size "${H}x${W}" --batch "$BATCH" $BENCH \
      "$@" --json "$OUT_DIR/$name.json" > "$OUT_DIR/$name.log" 2>&1; then
    "$PY" - "$OUT_DIR/$name.json" "$label" >> "$ROWS" <<'PYEOF'
import json, sys
r, label = json.load(open(sys.argv[1])), sys.argv[2]
for p, row in r["precisions"].items():
    gain = row["privreid"]["vs_fp32"]
    print(f"{r['arch']} {r['size']} batch {r['batch']}, {p}{label}: img/s privreid / raw\t"
          f"{row['privreid']['images_per_s']:.1f} / {row['raw']['images_per_s']:.1f} = {row['privreid_vs_raw']:.3f}"
          + (f"; {gain:.2f}x fp32" if p != "fp32" and gain else "")
          + (f"; compiling {row['compile_seconds']['privreid']:.0f} / {row['compile_seconds']['raw']:.0f} s"
             if row.get("compile_seconds") else ""))
peaks = {p: row.get("peak_memory_mib") for p, row in r["precisions"].items()}
if not label:
    print("peak GPU memory (MiB, max allocated)\t" + (", ".join(f"{p} {m:.0f}" for p, m in peaks.items())
                                                     if all(m is not None for m in peaks.values()) else "n/a (no CUDA)"))
PYEOF
  else
    row "$name benchmark" "FAILED (tail of $OUT_DIR/$name.log: $(tail -1 "$OUT_DIR/$name.log" | cut -c1-120))"
    FAILED=1
  fi
}
precision_run precision "" --precisions "$PRECISIONS"
precision_run precision-no-channels-last ", channels-last off" --precisions "$SWITCH_PRECISIONS" --no-channels-last
precision_run precision-no-cudnn-benchmark ", cudnn.benchmark off" --precisions "$SWITCH_PRECISIONS" \
  --no-cudnn-benchmark
# larger batches, the learning rate scaled linearly from 0.05 at batch $BATCH (the rows above)
for b in $BATCHES; do
  lr=$("$PY" -c "print(f'{0.05 * $b / $BATCH:g}')")
  precision_run "precision-batch$b" ", lr $lr (0.05 x B/$BATCH)" --precisions "$SWITCH_PRECISIONS" --batch "$b" --lr "$lr"
done
# --compile, at batch 32 and 64 (the learning rate scaled as above)
for b in $COMPILE_BATCHES; do
  lr=$("$PY" -c "print(f'{0.05 * $b / $BATCH:g}')")
  precision_run "precision-compile-batch$b" ", --compile, lr $lr (0.05 x B/$BATCH)" --precisions "$COMPILE_PRECISIONS" \
    --batch "$b" --lr "$lr" --compile --compile-backend "$COMPILE_BACKEND"
done

# 1b. host overhead per step, evaluation features/s, inversion iterations/s: privreid / plain torch loops
# shellcheck disable=SC2086
if "$PY" benchmarks/host_overhead.py --device "$DEVICE" $HOST --json "$OUT_DIR/host.json" > "$OUT_DIR/host.log" 2>&1; then
  "$PY" - "$OUT_DIR/host.json" >> "$ROWS" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
t, e, i = r["train"], r["eval"], r["inversion"]
o, f, n = t["overhead_ms_per_step"], e["features_per_s"], i["iterations_per_s"]
print(f"host overhead ms/step, tiny model {t['size']} batch {t['batch']}: privreid / raw\t"
      f"{o['privreid']:.2f} / {o['raw']:.2f} = {t['overhead_privreid_vs_raw']:.3f}")
print(f"evaluation {e['arch']} {e['size']} batch {e['batch']}, flip: features/s privreid / raw\t"
      f"{f['privreid']:.1f} / {f['raw']:.1f} = {e['privreid_vs_raw']:.3f}")
print(f"inversion ig {i['model']} {i['size']}: iterations/s privreid / raw\t"
      f"{n['privreid']:.2f} / {n['raw']:.2f} = {i['privreid_vs_raw']:.3f}")
PYEOF
else
  row "host-overhead benchmark" "FAILED (tail of $OUT_DIR/host.log: $(tail -1 "$OUT_DIR/host.log" | cut -c1-120))"
  FAILED=1
fi

# 2. seconds per FedPav round, 4 clients (synthA and synthB, 2 each) x STEPS steps: sequential, then K = 2
ROUND=(train --method fedpav --train-domains synthA,synthB --test-domains synthD --protocol by-identity
       --num-clients 2 --arch "$ARCH" --height "$H" --width "$W" --batch-size "$BATCH" --max-steps "$STEPS"
       --local-epochs 1 --rounds 2 --eval-every 0 --workers "$WORKERS" "${TINY[@]}")
round_row() {  # round_row LABEL DIR: s per round from summary.json (2 rounds and the final evaluation, halved)
  "$PY" -c "import json, sys; s = json.load(open(sys.argv[1] + '/summary.json')); print(sys.argv[2] + '\t' + f\"{s['wall_time_s'] / s['rounds']:.2f} s/round (2 rounds, final evaluation included)\")" "$2" "$1" >> "$ROWS"
}
check "fedpav-round-sequential" "" -- "$PY" -m privreid "${ROUND[@]}" --out "$OUT_DIR/round-seq"
[[ -f "$OUT_DIR/round-seq/summary.json" ]] && round_row "FedPav round, 4 clients x $STEPS steps, sequential" "$OUT_DIR/round-seq"
if "$PY" -m privreid train --help 2>/dev/null | grep -q -- "--parallel-clients"; then
  check "fedpav-round-parallel" "flwr,ray" -- "$PY" -m privreid "${ROUND[@]}" --parallel-clients 2 --out "$OUT_DIR/round-par"
  [[ -f "$OUT_DIR/round-par/summary.json" ]] && round_row "FedPav round, 4 clients x $STEPS steps, parallel K=2" "$OUT_DIR/round-par"
else
  row "FedPav round, parallel K=2" "n/a (parallel clients not available)"
fi

# 3. one DP-SGD step, one secure-aggregation round, INV_ITERS inversion iterations, on the device
ONE=(train --method fedpav --arch resnet18 --height 64 --width 32 --batch-size 8 --max-steps 1 --rounds 1
     --eval-every 0 "${TINY[@]}")
check "dp-sgd-step" "opacus" -- "$PY" -m privreid "${ONE[@]}" --dp-sgd --noise-multiplier 1.0 --out "$OUT_DIR/dp-sgd"
check "secure-aggregation-round" "flwr" -- "$PY" -m privreid "${ONE[@]}" --secure-aggregation --out "$OUT_DIR/secagg"
check "inversion-$INV_ITERS-iterations" "kornia,skimage" -- bash -c "'$PY' -m privreid ${ONE[*]} --out '$OUT_DIR/inv-model' && \
  '$PY' -m privreid invert --model '$OUT_DIR/inv-model/ckpt.pt' --iterations $INV_ITERS --device $DEVICE --out '$OUT_DIR/invert'"

"$PY" - "$ROWS" "$OUT_DIR/device.txt" <<'PYEOF' | tee "$OUT_DIR/table.md"
import sys
rows = [line.rstrip("\n").split("\t", 1) for line in open(sys.argv[1]) if line.strip()]
device = open(sys.argv[2]).read().strip().splitlines()
print(f"GPU check, {device[0]}; {' / '.join(device[1:])}\n")
width = max(len(r[0]) for r in rows)
print(f"| {'check':{width}s} | result |\n|{'-' * (width + 2)}|--------|")
for name, value in rows:
    print(f"| {name:{width}s} | {value} |")
PYEOF

# 4. (issue 25) the first rounds of the paper presets
if [[ "${PRESETS:-1}" != 0 ]]; then
  for preset in fedpav fedreid; do
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$PY" -m privreid train --config "configs/$preset-paper.yaml" --data synth --pretrained none --device "$DEVICE" \
        --workers 4 --rounds "$ROUNDS" --eval-every 1 --quiet --out "$OUT_DIR/$preset" --overwrite $EXTRA \
        > "$OUT_DIR/$preset.log" 2>&1 || { tail -20 "$OUT_DIR/$preset.log"; exit 1; }
    end=$(date +%s.%N)
    "$PY" - "$OUT_DIR/$preset" "$start" "$end" <<'PYEOF' | tee -a "$OUT_DIR/summary.txt"
import json, sys
from pathlib import Path
run, start, end = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
s = json.loads((run / "summary.json").read_text())
recs = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if l.strip()]
train = [r for r in recs if r.get("scope") == "train"]
seen = s.get("global_seen") or {}
print(f"{s['method']}: {s['rounds']} rounds in {end - start:.1f} s wall (process start included), "
      f"{s['wall_time_s']:.1f} s training+evaluation; clients {len(s['clients'])}; "
      f"metric {s['evaluation']['metric']}, flip {s['evaluation']['flip']}; "
      f"seen R1 {100 * seen.get('rank1', float('nan')):.1f} mAP {100 * seen.get('mAP', float('nan')):.1f}; "
      f"train steps {sum(int(r.get('steps', 0)) for r in train)}; deviations {len(s['deviations'])}")
PYEOF
  done
fi
exit "$FAILED"
