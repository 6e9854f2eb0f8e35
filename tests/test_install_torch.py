"""scripts/install-torch.sh (`make demo` / `make test`): which torch build the venv gets on a machine, in one line."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "install-torch.sh"


def fake_python(tmp_path: Path, *, torch_build: str | None, pip_ok: bool, installs: str | None = None) -> Path:
    """A stand-in for the venv's python: ``-c`` answers with torch_build (or fails), ``-m pip`` succeeds or fails
    and, when it succeeds, leaves ``installs`` as the torch the next ``-c`` reports; every pip call is recorded."""
    state = tmp_path / "torch"
    if torch_build:
        state.write_text(torch_build)
    script = tmp_path / "python"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "-c" ]; then [ -f {state} ] && cat {state} && exit 0; exit 1; fi
echo "$@" >> {tmp_path / 'pip-calls'}
{'printf "%s" "' + installs + '" > ' + str(state) if installs else ':'}
exit {0 if pip_ok else 1}
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def run(tmp_path, python, *, gpu: bool):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpu:
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("numpy==2.0.0\ntorch==2.14.1\ntorchvision==0.29.1\n")
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    res = subprocess.run(["sh", str(SCRIPT), str(python), str(constraints)], capture_output=True, text=True, env=env,
                         timeout=30)
    assert res.returncode == 0 and res.stderr == "", res
    lines = res.stdout.splitlines()
    assert len(lines) == 1, lines
    calls = (tmp_path / "pip-calls").read_text() if (tmp_path / "pip-calls").exists() else ""
    return lines[0], calls


def test_a_torch_in_the_venv_is_reused(tmp_path):
    line, calls = run(tmp_path, fake_python(tmp_path, torch_build="2.14.1+cpu CPU", pip_ok=True), gpu=False)
    assert line == "torch: reusing the venv's torch 2.14.1+cpu CPU build" and calls == ""


def test_without_a_gpu_the_cpu_build_is_installed_at_the_pinned_versions(tmp_path):
    line, calls = run(tmp_path, fake_python(tmp_path, torch_build=None, pip_ok=True, installs="2.14.1+cpu CPU"),
                      gpu=False)
    assert line == "torch: no NVIDIA GPU here: installed the CPU build, torch 2.14.1+cpu CPU"
    assert "--index-url https://download.pytorch.org/whl/cpu torch==2.14.1 torchvision==0.29.1" in calls


@pytest.mark.parametrize("pip_ok, says", [(False, "CPU index is out of reach"), (True, "the only torch 2.14.1 pip could reach is the CUDA build")])
def test_without_a_gpu_and_no_cpu_build_one_line_says_the_5_gb_cuda_build_comes(tmp_path, pip_ok, says):
    python = fake_python(tmp_path, torch_build=None, pip_ok=pip_ok, installs="2.14.1+cu130 CUDA" if pip_ok else None)
    line, _ = run(tmp_path, python, gpu=False)
    assert says in line and "5 GB" in line


def test_with_a_gpu_pypi_s_cuda_build_is_left_to_pip(tmp_path):
    line, calls = run(tmp_path, fake_python(tmp_path, torch_build=None, pip_ok=True), gpu=True)
    assert "NVIDIA GPU is here" in line and calls == ""
