#!/bin/sh
# Before `pip install -e .` in `make demo` / `make test`: on a machine without an NVIDIA GPU, a CPU build of torch
# (about 0.7 GB) instead of PyPI's CUDA build (about 5 GB), at the versions of constraints.txt.  A torch already in
# the venv is reused.  Prints one line saying which build the venv got and why.
# Usage: scripts/install-torch.sh VENV_PYTHON CONSTRAINTS
py="$1"
constraints="$2"
pin() { sed -n "s/^$1==//p" "$constraints"; }
build() { "$py" -c "import torch; print(torch.__version__, 'CUDA' if torch.version.cuda else 'CPU')" 2>/dev/null; }

have=$(build)
if [ -n "$have" ]; then
    echo "torch: reusing the venv's torch $have build"
    exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    echo "torch: an NVIDIA GPU is here: installing PyPI's torch $(pin torch), the CUDA build"
    exit 0
fi
if "$py" -m pip install --quiet --disable-pip-version-check --timeout 15 --retries 1 -c "$constraints" \
        --index-url https://download.pytorch.org/whl/cpu "torch==$(pin torch)" "torchvision==$(pin torchvision)" \
        >/dev/null 2>&1; then
    have=$(build)
    case "$have" in
        *CPU) echo "torch: no NVIDIA GPU here: installed the CPU build, torch $have" ;;
        *) echo "torch: no NVIDIA GPU here, but the only torch $(pin torch) pip could reach is the CUDA build (about 5 GB); it runs on the CPU" ;;
    esac
else
    echo "torch: no NVIDIA GPU here, but PyTorch's CPU index is out of reach: installing PyPI's torch $(pin torch), the CUDA build (about 5 GB; it runs on the CPU)"
fi
