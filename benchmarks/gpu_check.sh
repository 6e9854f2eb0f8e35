#!/usr/bin/env bash
# The prepared GPU check (issue 25): the first rounds of the FedPav and FedReID paper presets (ResNet-50,
# 256x128, their reference-code schedules and metrics) on the embedded synthetic federation, on a CUDA device.
# No dataset or ImageNet weight can be downloaded on the lent machine, so --pretrained none and --data synth:
# the figures are per-round costs and the plumbing (CUDA, data workers, evaluation), not paper accuracies.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]        (on the GPU machine; python3 with torch, typer, pyyaml, tqdm)
#   DEVICE=cpu ROUNDS=1 EXTRA="--arch resnet18 --height 64 --width 32 --max-steps 1" bash benchmarks/gpu_check.sh
set -euo pipefail
OUT_DIR=${1:-${OUT:-runs/gpu-check}}
DEVICE=${DEVICE:-cuda}
ROUNDS=${ROUNDS:-3}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
} | tee "$OUT_DIR/device.txt"
for preset in fedpav fedreid; do
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$PY" -m privreid train --config "configs/$preset-paper.yaml" --data synth --pretrained none --device "$DEVICE" \
      --workers 4 --rounds "$ROUNDS" --eval-every 1 --quiet --out "$OUT_DIR/$preset" --overwrite ${EXTRA:-} \
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
