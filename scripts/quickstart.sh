#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (with the CUDA toolkit at /usr/local/cuda) and run the main job on the
# built-in default: build dskit, build the kit for the default architecture and verify it, make the
# tiny synthetic model (real vocabulary and chat tokens, random weights), start the HTTP server on it
# (CPU backend), answer one chat request through it with curl, and stop it.
# Usage: scripts/quickstart.sh [ARCH]   (default sm_90: H100/H200)
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-sm_90}
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
build/dskit-build --arch "$arch" --out kits
build/dskit verify "kits/dskit-$arch.tar.zst"
build/dskit info "kits/dskit-$arch.tar.zst"
build/dskit mkmodel --preset tiny --seed 1 --out models/tiny --force
build/dskit verify "kits/dskit-$arch.tar.zst" --needs models/tiny
# Serve it: start dskit serve, wait for its ready line, answer one chat request with curl, stop it (SIGTERM:
# a drain, then exit 0).
log=$(mktemp)
build/dskit serve --model models/tiny --served-model-name tiny --port 0 > "$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 600); do
  grep -q 'ready on' "$log" && break
  kill -0 "$pid" 2>/dev/null || { echo "quickstart: dskit serve did not start" >&2; exit 1; }
  sleep 0.1
done
cat "$log"
url=$(grep -o 'http://[^ ]*' "$log" | head -1)
url=${url%:}
echo "one chat request to $url (random weights, so random text):"
curl -sS "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "tiny", "messages": [{"role": "user", "content": "Hello! Who are you?"}], "max_tokens": 32,
       "chat_template_kwargs": {"enable_thinking": false}}' | python3 -m json.tool --no-ensure-ascii
kill -TERM "$pid"
wait "$pid"
trap - EXIT
rm -f "$log"
echo "dskit serve stopped"
