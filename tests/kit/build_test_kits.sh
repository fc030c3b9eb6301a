#!/bin/sh
# ctest fixture (kit_build): the kits the kit tests read, built once per test run into OUT: the full
# sm_90 kit, and an sm_121 kit of what the tiny model needs (a second arch at a fraction of the compiles).
# The compile cache makes a rebuild with unchanged sources nearly free.
# usage: build_test_kits.sh BUILD_DIR OUT
set -e
bin=$1
out=$2
rm -rf "$out"
mkdir -p "$out"
log="$out/build.log"
if ! { "$bin/dskit" mkmodel --preset tiny --seed 3 --out "$out/tiny" &&
       "$bin/dskit-build" --arch sm_90 --out "$out" &&
       "$bin/dskit-build" --arch sm_121 --for "$out/tiny" --out "$out"; } > "$log" 2>&1; then
    cat "$log"
    exit 1
fi
echo "test kits in $out"
