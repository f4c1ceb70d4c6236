#!/usr/bin/env bash
# The real engine's logits on arm64: Debian bookworm's arm64 CPython 3.11, run by qemu-aarch64 -cpu max,
# imports a copy of the llamay the host's Python imports, its C core cross-built for aarch64
# (aarch64-linux-gnu-gcc, setup.py's flags); scripts/logits_digest.py prints one digest per (model, kernel
# path, thread count) there (portable, neon, dotprod, i8mm) and on the host (every path this CPU runs).
#   scripts/arm64_python.sh [MODEL.gguf ...]   default: SmolLM2 and Gemma 3 270M (as tests/conftest.py finds them)
# PYTHON (default: python) is the host's Python. Downloads once into ${LLAMAY_TEST_CACHE:-~/.cache/llamay-tests}
# /arm64-python: the interpreter and the libraries it and the wheels load, from deb.debian.org (apt-get with
# its own arm64 lists and state: the host's dpkg is left alone), and the aarch64 wheels of what the engine
# imports (numpy, regex, xxhash) at the host's versions, from PyPI. Prints both sides' digests; exits
# non-zero unless every digest of a model is the same (3: a tool is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
for tool in aarch64-linux-gnu-gcc qemu-aarch64 apt-get dpkg-deb "$PY"; do
    command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 3; }
done
[ -e "$KEYRING" ] || { echo "$KEYRING not found (apt-get install debian-archive-keyring)" >&2; exit 3; }
cache=${LLAMAY_TEST_CACHE:-$HOME/.cache/llamay-tests}/arm64-python
root=$cache/sysroot
DEBS=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libgcc-s1 libstdc++6 libexpat1 zlib1g
      libffi8)

# the sysroot: Debian's packages unpacked, not installed (qemu -L finds the loader and libraries there)
if [ ! -e "$root/.complete" ]; then
    apt=$cache/apt
    rm -rf "$apt" "$root" && mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs" "$root"
    for suite in "debian bookworm" "debian-security bookworm-security"; do
        echo "deb [arch=arm64 signed-by=$KEYRING] http://deb.debian.org/${suite% *} ${suite#* } main"
    done > "$apt/sources.list"
    touch "$apt/status"
    APT=(-qq -o APT::Architecture=arm64 -o APT::Architectures=arm64 -o Dir::Etc::SourceList="$apt/sources.list"
         -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists="$apt/lists" -o Dir::State::status="$apt/status"
         -o Dir::Cache="$apt/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)")
    apt-get "${APT[@]}" update
    (cd "$apt/debs" && apt-get "${APT[@]}" download "${DEBS[@]}")
    for deb in "$apt/debs"/*.deb; do dpkg-deb -x "$deb" "$root"; done
    rm -rf "$apt" && touch "$root/.complete"
fi
ARM=(qemu-aarch64 -L "$root" -cpu max "$root/usr/bin/python3.11")

# the wheels, at the host's versions (a mismatch would compare two numpys, not two architectures)
pins=$("$PY" -c "from importlib.metadata import version as v
print(*(f'{p}=={v(p)}' for p in ('numpy', 'regex', 'xxhash')))")
site=$cache/site-$(echo "$pins" | tr ' =' '-_')
if [ ! -e "$site/.complete" ]; then
    rm -rf "$site"
    "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore --target "$site" \
        --python-version 3.11 --implementation cp --only-binary :all: \
        --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 $pins
    touch "$site/.complete"
fi

# the package the host imports, copied, with its C core cross-built from this checkout's sources (an installed
# package carries no C sources; objects rebuilt when a source or a header is newer, or the flags changed)
pkg=$("$PY" -c "import llamay, os; print(os.path.dirname(llamay.__file__))")
csrc=src/llamay/kernels/csrc
out=build/arm64-python
FLAGS=(-DNDEBUG -fwrapv -fPIC -O3 -std=gnu11 -ffp-contract=off -fno-fast-math -Wall -pthread)
mkdir -p "$out/obj"
[ "$(cat "$out/obj/flags" 2>/dev/null)" = "${FLAGS[*]}" ] \
    || { rm -f "$out"/obj/*; echo "${FLAGS[*]}" > "$out/obj/flags"; }
header=$(ls -t "$csrc"/*.h | head -1)
for c in "$csrc"/*.c; do
    o=$out/obj/$(basename "$c" .c).o
    [ "$o" -nt "$c" ] && [ "$o" -nt "$header" ] || echo "$c"
done | xargs -r -P 2 -I{} sh -c "aarch64-linux-gnu-gcc ${FLAGS[*]} -c {} -o $out/obj/\$(basename {} .c).o"
rm -rf "$out/llamay" && cp -r "$pkg" "$out/llamay"
find "$out/llamay" \( -name "*.so" -o -name __pycache__ \) -prune -exec rm -rf {} +
aarch64-linux-gnu-gcc -shared -pthread -o "$out/llamay/kernels/_kernels.cpython-311-aarch64-linux-gnu.so" "$out"/obj/*.o

# both sides, on the same files
models=("$@")
[ $# != 0 ] || mapfile -t models < <("$PY" scripts/logits_digest.py --models)
"$PY" scripts/logits_digest.py "${models[@]}" | sed -u 's/^/x86-64 /' | tee "$out/digests.txt"
PYTHONPATH="$out:$site" "${ARM[@]}" scripts/logits_digest.py "${models[@]}" | sed -u 's/^/arm64 (qemu) /' \
    | tee -a "$out/digests.txt"
status=0
for model in "${models[@]}"; do
    runs=$(grep -F " $(basename "$model" .gguf) " "$out/digests.txt" | grep "thread(s):" || true)
    if [ -n "$runs" ] && [ "$(echo "$runs" | awk '{print $NF}' | sort -u | wc -l)" = 1 ]; then
        echo "$(basename "$model"): one digest in $(echo "$runs" | wc -l) runs (every path and thread count," \
             "both architectures)"
    else
        echo "$(basename "$model"): DIFFERENT across paths or architectures"; status=1
    fi
done
exit $status
