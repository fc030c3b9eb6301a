#!/usr/bin/env bash
# Install the Debian packages dskit builds and tests with (Debian 12). Needs root or sudo.
# The CUDA toolkit (NVRTC, cuda.h) is expected at /usr/local/cuda; it is not a Debian package.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config zstd python3 python3-pip curl
      libarchive-dev libxxhash-dev libjansson-dev libpcre2-dev libutf8proc-dev
      libcmocka-dev libmicrohttpd-dev libaio-dev libzstd-dev libpng-dev libjpeg62-turbo-dev
      python3-jsonschema)
sudo=""
if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
# PyPI packages: Debian's own python3 refuses pip installs into the system (PEP 668) unless told
# otherwise; other pythons take the plain install.
pip_install() {
  local pip=(python3 -m pip install --quiet --disable-pip-version-check "$@")
  if [ "$(id -u)" != 0 ] && [ -z "${VIRTUAL_ENV:-}" ]; then pip+=(--user); fi
  "${pip[@]}" 2>/dev/null || "${pip[@]}" --break-system-packages
}
# The server tests drive dskit serve with the official openai client.
if ! python3 -c 'import openai' 2>/dev/null; then
  pip_install openai
fi
# REF's Pillow (13.0) and numpy for tests/vision/check_pillow.py: Debian's python3-pil (9.4) resamples
# differently, so the test skips itself without Pillow 13 (a failed install only makes it skip).
if ! python3 -c 'import sys, numpy, PIL; sys.exit(int(PIL.__version__.split(".")[0]) < 13)' 2>/dev/null; then
  pip_install 'pillow==13.0.0' numpy ||
    echo "install-deps: Pillow 13 and numpy were not installed; test_vision_pillow will skip" >&2
fi
# NVIDIA's cuobjdump and the nvdisasm it runs (PyPI, 5.5 MB) for tests/kit/check_sass.py: the toolkit here has nvcc
# and ptxas but no SASS reader.
if ! python3 "$(dirname "$0")/../tests/kit/check_sass.py" --cuobjdump-found 2>/dev/null; then
  pip_install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
fi
if [ ! -f /usr/local/cuda/include/cuda.h ] || [ ! -f /usr/local/cuda/include/nvrtc.h ]; then
  echo "install-deps: the CUDA toolkit (cuda.h, NVRTC) is needed at /usr/local/cuda" >&2
  exit 1
fi
