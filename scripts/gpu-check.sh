#!/usr/bin/env bash
# The GPU checks of a build on a machine with a GPU, in one go (docs/engine.md "Checking on a GPU"):
# every kernel family's checks against its CPU reference, the whole model layer by layer against the CPU
# backend (teacher forcing), the GPU against itself (batched, chunked == alone), dskit run on both
# backends, and the kit's timings. Usage: scripts/gpu-check.sh BUILD KIT OUT (OUT gets the logs).
set -uo pipefail
build=$1 kit=$2 out=$3
mkdir -p "$out"
model=$out/tiny
fail=0
step() { echo "== $*"; }
step "tiny model"
"$build/dskit" mkmodel --preset tiny --out "$model" --force > "$out/mkmodel.log" 2>&1 || { cat "$out/mkmodel.log"; exit 1; }
step "verify the kit for it, on the device"
"$build/dskit" verify "$kit" --needs "$model" --device > "$out/verify.log" 2>&1 || { tail -20 "$out/verify.log"; fail=1; }
tail -3 "$out/verify.log"
step "gpu_tests (every family, engine, engine_exact, engine_draft)"
DSKIT_TEST_MODEL=$model timeout 900 "$build/tests/gpu_tests" "$kit" "${@:4}" > "$out/gpu.log" 2>&1 || fail=1
grep -E "FAIL|failed|skipped" "$out/gpu.log" | head -40
grep -E "^(PASS|FAIL) +engine" "$out/gpu.log" | head -20
step "dskit run, both backends, greedy, the same prompt"
ids="0 1000 2000 3000 4000 5000 6000 7000 8000 9000 10000 11000"
for be in cpu gpu; do
  t0=$(date +%s.%N)
  "$build/dskit" run --backend $be --kit "$kit" --model "$model" --prompt-ids "$ids" \
    --max-tokens 48 --print-ids > "$out/run-$be.txt" 2> "$out/run-$be.err" || { tail -5 "$out/run-$be.err"; fail=1; }
  echo "$be ($(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s): $(head -c 300 "$out/run-$be.txt")"
  tail -2 "$out/run-$be.err"
done
step "dskit run --backend gpu --draft == without (greedy and seeded)"
for t in 0 0.8; do
  "$build/dskit" run --backend gpu --kit "$kit" --model "$model" --prompt-ids "$ids" --max-tokens 48 --print-ids \
    --temperature $t --seed 7 > "$out/serial-$t.txt" 2> /dev/null
  "$build/dskit" run --backend gpu --kit "$kit" --model "$model" --prompt-ids "$ids" --max-tokens 48 --print-ids \
    --temperature $t --seed 7 --draft > "$out/draft-$t.txt" 2> "$out/draft-$t.err"
  if cmp -s "$out/serial-$t.txt" "$out/draft-$t.txt"; then echo "T $t: drafted == serial; $(tail -1 "$out/draft-$t.err")"
  else echo "T $t: drafted != serial"; tail -3 "$out/draft-$t.err"; fail=1; fi
done
step "dskit run --backend gpu: every Engram placement gives the same tokens (device, host, nvme)"
"$build/dskit" engram pack --model "$model" --out "$out/pack" --force > "$out/pack.log" 2>&1 || { tail -3 "$out/pack.log"; fail=1; }
for pl in device host "nvme:$out/pack"; do
  "$build/dskit" run --backend gpu --kit "$kit" --model "$model" --prompt-ids "$ids" --max-tokens 48 --print-ids \
    --temperature 0.8 --seed 7 --engram "$pl" > "$out/engram-${pl%%:*}.txt" 2> "$out/engram-${pl%%:*}.err" || fail=1
done
if cmp -s "$out/engram-device.txt" "$out/engram-host.txt" && cmp -s "$out/engram-device.txt" "$out/engram-nvme.txt"; then
  echo "device == host == nvme: $(head -c 120 "$out/engram-device.txt")"
else echo "the placements differ"; head -c 200 "$out"/engram-*.txt; tail -3 "$out"/engram-*.err; fail=1; fi
step "dskit bench kit"
timeout 300 "$build/dskit" bench kit "$kit" > "$out/bench-kit.txt" 2>&1 || fail=1
tail -60 "$out/bench-kit.txt"
exit $fail
