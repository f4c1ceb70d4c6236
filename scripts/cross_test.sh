#!/usr/bin/env bash
# The C core's checks without Python: tests/csrc/selftest.c (every kernel path against the portable one, byte
# for byte) and tests/csrc/tiny_logits.c (a tiny two-layer decoder's logits, one digest per path); and, with
# Python, the real models' logits on arm64 (python-logits).
#   scripts/cross_test.sh native [LIB]   build with ${CC:-cc} (with LIB, a built _kernels library: link to it
#                                        instead of the sources); every path this CPU runs
#   scripts/cross_test.sh aarch64        cross-build with aarch64-linux-gnu-gcc (or CC=clang-16: --target),
#                                        static, run under qemu-aarch64: CPU detection on three CPU models,
#                                        then -cpu max with each path forced
#   scripts/cross_test.sh windows        cross-build with x86_64-w64-mingw32-gcc (static; tiny_logits linked
#                                        to the core as a DLL, as a Windows wheel ships it), run under Wine
#                                        (WINE, else wine64 or Debian's /usr/lib/wine/wine64) if present
#   scripts/cross_test.sh logits [LIB]   native and aarch64, then: the logits' digest is the same on every
#                                        path of both architectures
#   scripts/cross_test.sh python-logits [MODEL ...]   the real engine and models, not the tiny decoder: an
#                                        arm64 CPython under qemu against the host's (scripts/arm64_python.sh)
# Flags as setup.py's. Prints what it compared; exits non-zero on any difference (3: a tool is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-native}
[ "$target" != python-logits ] || exec scripts/arm64_python.sh "${@:2}"

if [ "$target" = logits ]; then
    native=$("$0" native ${2:+"$2"}) || { echo "$native"; exit 1; }
    arm=$("$0" aarch64) || { echo "$arm"; exit 1; }
    echo "$native" | grep "thread(s):" | sed 's/^/x86-64 /'
    echo "$arm" | grep "thread(s):" | sed 's/^/arm64 (qemu) /'
    n=$( (echo "$native"; echo "$arm") | grep "thread(s):" | awk '{print $NF}' | sort -u | wc -l)
    [ "$n" = 1 ] && echo "logits: identical on every path of both architectures" && exit 0
    echo "logits: DIFFERENT across paths or architectures"; exit 1
fi

FLAGS=(-O3 -std=gnu11 -ffp-contract=off -fno-fast-math -Wall)
[ "$target" = windows ] || FLAGS+=(-pthread)
exe=""; [ "$target" != windows ] || exe=.exe
case "$target" in
native) CC_=${CC:-cc}; LINK=(); RUN=() ;;
aarch64) CC_=${CC:-aarch64-linux-gnu-gcc}; LINK=(-static); RUN=(qemu-aarch64 -cpu max)
         [[ "$CC_" != *clang* ]] || FLAGS+=(--target=aarch64-linux-gnu) ;;
windows) CC_=x86_64-w64-mingw32-gcc; LINK=(-static -lsynchronization)
         wine=${WINE:-$(command -v wine64 || ls /usr/lib/wine/wine64 2>/dev/null || true)}
         RUN=(env WINEDEBUG=-all WINEPREFIX="$PWD/build/wineprefix" "$wine") ;;
*) echo "usage: $0 native [LIB] | aarch64 | windows | logits [LIB] | python-logits [MODEL ...]" >&2; exit 2 ;;
esac
command -v "$CC_" >/dev/null || { echo "$CC_ not found" >&2; exit 3; }
[ "$target" != aarch64 ] || command -v qemu-aarch64 >/dev/null || { echo "qemu-aarch64 not found" >&2; exit 3; }

out=build/selftest-$target
rm -rf "$out" && mkdir -p "$out/core"
if [ "$target" = native ] && [ -n "${2:-}" ]; then
    lib=$(realpath "$2")
    core=("$lib" -Wl,-rpath,"$(dirname "$lib")")
    echo "linked to $lib"
else # one compiler per source, two at a time
    ls src/llamay/kernels/csrc/*.c | xargs -P 2 -I{} sh -c "$CC_ ${FLAGS[*]} -c {} -o $out/core/\$(basename {} .c).o"
    core=("$out"/core/*.o)
fi
"$CC_" "${FLAGS[@]}" -o "$out/selftest$exe" tests/csrc/selftest.c "${core[@]}" "${LINK[@]}" -lm
if [ "$target" = windows ]; then # tiny_logits through the DLL as setup.py links it there (exports: LY_API only)
    "$CC_" -shared -s "${core[@]}" "${LINK[@]}" -o "$out/_kernels.dll"
    core=("$out/_kernels.dll")
fi
"$CC_" "${FLAGS[@]}" -o "$out/tiny_logits$exe" tests/csrc/tiny_logits.c "${core[@]}" "${LINK[@]}" -lm

# the logits' digest: one value over every path and thread count of this build
logits() {
    "${RUN[@]}" "$out/tiny_logits$exe" | tee "$out/logits.txt"
    [ "$(grep "thread(s):" "$out/logits.txt" | awk '{print $NF}' | sort -u | wc -l)" = 1 ] \
        || { echo "logits: DIFFERENT across paths"; return 1; }
}

if [ "$target" = windows ] && [ -z "$wine" ]; then
    echo "built $out/selftest.exe and tiny_logits.exe; no Wine to run them"
    exit 0
fi
if [ "$target" != aarch64 ]; then
    status=0
    "${RUN[@]}" "$out/selftest$exe" || status=1
    logits || status=1
    exit $status
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
logits || status=1
exit $status
