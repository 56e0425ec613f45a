#!/usr/bin/env bash
# Installs what building xqajit needs on Debian 12, only what is missing.
# Runs `apt-get update` only when something has to be installed.
set -euo pipefail

# libhiredis-dev: the Redis client the remote cache tier dlopens (any soname it
# ships, 0.14 or 1.x); redis-server: the tests start one on a loopback port.
packages=(cmake ninja-build g++ libfmt-dev libspdlog-dev nlohmann-json3-dev catch2 libcli11-dev ccache
          libhiredis-dev redis-server)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

# The CUDA toolkit is not a Debian package here: only its headers (cuda.h, nvrtc.h)
# are needed to build, and libnvrtc at run time to compile kernels.
cuda_root=${CUDAToolkit_ROOT:-${CUDA_PATH:-/usr/local/cuda}}
if [[ ! -f $cuda_root/include/cuda.h || ! -f $cuda_root/include/nvrtc.h ]] && ! command -v nvcc >/dev/null; then
  echo "setup: the CUDA toolkit was not found (looked for cuda.h and nvrtc.h under $cuda_root and for nvcc in PATH)." >&2
  echo "setup: install it (e.g. cuda-toolkit-13-0 from NVIDIA's apt repository) or set CUDAToolkit_ROOT." >&2
  exit 1
fi
