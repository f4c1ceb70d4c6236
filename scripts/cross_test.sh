#!/usr/bin/env bash
# The C core's self-test (tests/csrc/selftest.c): every kernel path against the portable one, byte for byte.
#   scripts/cross_test.sh native [LIB]  build with ${CC:-cc}, check every path this CPU runs; with LIB (a
#                                       built _kernels library) link the test to it instead of the sources
#   scripts/cross_test.sh aarch64       cross-build with aarch64-linux-gnu-gcc (or CC=clang-16: --target),
#                                       static, run under qemu-aarch64: CPU detection on three CPU models,
#                                       then -cpu max with each path forced
# Flags as setup.py's. Prints the kernels and paths compared; exits non-zero on any difference (3: a tool
# is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-native}
FLAGS=(-O3 -std=gnu11 -ffp-contract=off -fno-fast-math -pthread -Wall)
case "$target" in
native) CC_=${CC:-cc}; LINK=() ;;
aarch64) CC_=${CC:-aarch64-linux-gnu-gcc}; LINK=(-static)
         [[ "$CC_" != *clang* ]] || FLAGS+=(--target=aarch64-linux-gnu) ;;
*) echo "usage: $0 native|aarch64" >&2; exit 2 ;;
esac
command -v "$CC_" >/dev/null || { echo "$CC_ not found" >&2; exit 3; }
[ "$target" = native ] || command -v qemu-aarch64 >/dev/null || { echo "qemu-aarch64 not found" >&2; exit 3; }

out=build/selftest-$target
rm -rf "$out" && mkdir -p "$out"
if [ "$target" = native ] && [ -n "${2:-}" ]; then
    lib=$(realpath "$2")
    "$CC_" "${FLAGS[@]}" -o "$out/selftest" tests/csrc/selftest.c "$lib" -Wl,-rpath,"$(dirname "$lib")" -lm
    echo "self-test linked to $lib"
    exec "$out/selftest"
fi
# one compiler per source, two at a time
ls src/llamay/kernels/csrc/*.c tests/csrc/selftest.c |
    xargs -P 2 -I{} sh -c "$CC_ ${FLAGS[*]} -c {} -o $out/\$(basename {} .c).o"
"$CC_" "${FLAGS[@]}" "${LINK[@]}" -o "$out/selftest" "$out"/*.o -lm

if [ "$target" = native ]; then
    exec "$out/selftest"
fi

# detection: what each CPU model offers (cortex-a53: Armv8.0; neoverse-n1: dotprod; max: dotprod and i8mm)
# (clang before 16 builds no dotprod or i8mm path: common.h LY_ARM_DOTPROD, so only GCC's list is exact)
expect() {
    got=$(qemu-aarch64 -cpu "$1" "$out/selftest" --paths)
    echo "qemu -cpu $1: $got"
    [ -n "${CC:-}" ] || [ "$got" = "paths this CPU runs: $2" ] || { echo "  expected: $2" >&2; exit 1; }
}
expect cortex-a53 "portable neon"
expect neoverse-n1 "portable neon dotprod"
expect max "portable neon dotprod i8mm"
status=0
for path in $(qemu-aarch64 -cpu max "$out/selftest" --paths | cut -d: -f2); do
    [ "$path" = portable ] && continue
    echo "== qemu -cpu max, $path forced"
    qemu-aarch64 -cpu max "$out/selftest" "$path" | tail -n +2 || status=1
done
exit $status
