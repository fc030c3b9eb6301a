#!/usr/bin/env bash
# Build everything and run the CPU test suite (what CI runs). No GPU needed.
# The Release build is built too (not tested): every build type must build warning-free (-Werror).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build-release
# Label long (the kernel emulator over every family, docs/emulator.md) is run by hand: ctest -L long.
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE long
