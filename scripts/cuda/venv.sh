#!/usr/bin/env bash
# Sourced by scripts/cuda/check-kernels.sh and scripts/device/kit.sh: installs
# NVIDIA's pinned NVRTC and ptxas wheels (CUDA 12.4.1, as the cudarc bindings)
# into a venv once, then sets
#   nvrtc_lib  the directory holding libnvrtc.so.12 and its builtins
#   ptxas      the ptxas binary
# Env: SLUICE_CUDA_VENV  the venv (default ~/.cache/sluice/cuda-venv)

NVRTC_PIN="nvidia-cuda-nvrtc-cu12==12.4.127"
NVCC_PIN="nvidia-cuda-nvcc-cu12==12.4.131"

venv="${SLUICE_CUDA_VENV:-$HOME/.cache/sluice/cuda-venv}"
stamp="$venv/.sluice-pins"
pins="$NVRTC_PIN $NVCC_PIN"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$pins" ] || [ ! -x "$venv/bin/python" ]; then
  echo "==> installing $pins into $venv"
  if ! python3 -m venv "$venv"; then
    echo "error: python3 -m venv failed; install python3-venv (apt-get install python3-venv)" >&2
    exit 1
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$NVRTC_PIN" "$NVCC_PIN"
  echo "$pins" > "$stamp"
fi

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
nvrtc_lib="$site/nvidia/cuda_nvrtc/lib"
ptxas="$site/nvidia/cuda_nvcc/bin/ptxas"
for f in "$nvrtc_lib/libnvrtc.so.12" "$ptxas"; do
  if [ ! -e "$f" ]; then
    echo "error: $f is missing from the venv; delete $venv and rerun" >&2
    exit 1
  fi
done
export nvrtc_lib ptxas
