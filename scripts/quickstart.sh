#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (with the CUDA toolkit at /usr/local/cuda) and run the main job on the
# built-in default: build dskit, build the kit for the default architecture and verify it, make the
# tiny synthetic model (real vocabulary and chat tokens, random weights) and generate from it on the CPU.
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
echo '{"messages": [{"role": "user", "content": "Hello! Who are you?"}]}' |
  build/dskit tokenize --tokenizer models/tiny/tokenizer.json --chat > models/tiny/chat-prompt.ids
echo "chat prompt: $(wc -w < models/tiny/chat-prompt.ids) tokens; the tiny model's answer (random weights, so random text):"
build/dskit run --backend cpu --model models/tiny --prompt-ids "$(cat models/tiny/chat-prompt.ids)" --max-tokens 32
