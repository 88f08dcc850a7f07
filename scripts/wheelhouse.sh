#!/usr/bin/env bash
# Wheels of every dependency except torch, for an offline install on a GPU machine.
#
#   scripts/wheelhouse.sh [--python X.Y] [DIR]
#
# Fills DIR (default: wheelhouse/ in the repository, git-ignored) with the project's own wheel and
# binary wheels of its runtime dependencies for CPython X.Y on x86-64 Linux (default: the version
# of python3 here), at the exact versions of requirements.lock. torch and its CUDA stack (triton,
# nvidia-*, cuda-*) are left out: a GPU machine keeps its own. `scripts/gpu_check.sh --paper` then
# installs from DIR with `pip install --no-index --find-links DIR` (no network there; DESIGN 11).
#
# How: pip resolves the project for the target Python and platform (`pip install --dry-run
# --report`: nothing is built or installed; a dependency-free placeholder stands in for torch),
# and `pip download --no-deps --only-binary=:all:` fetches each resolved package but torch's stack. Platforms: manylinux
# wheels up to glibc 2.28 (manylinux2014 = 2.17, 2.24, 2.27, 2.28; pip accepts older tags under
# a newer one), i.e. RHEL 8+, Ubuntu 20.04+; $WHEELHOUSE_PLATFORMS replaces the list. Needs a
# network (a package index) here, none on the GPU machine. Exit status 0 when every wheel is in
# DIR, 2 for a bad argument, else pip's.
set -euo pipefail

usage() { sed -n '2,18p' "$0"; }
PYVER=""
while [ $# -gt 0 ]; do
  case "$1" in
    --python)
      [ $# -ge 2 ] || { echo "wheelhouse.sh: --python needs a version X.Y, e.g. --python 3.12" >&2; exit 2; }
      PYVER=$2; shift 2 ;;
    --python=*) PYVER=${1#--python=}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "wheelhouse.sh: unknown option '$1'; allowed: --python X.Y, -h" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -le 1 ] || { echo "wheelhouse.sh: one DIR at most, got: $*" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HOST_PY=${PYTHON:-python3}
[ -n "$PYVER" ] || PYVER=$("$HOST_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if ! [[ "$PYVER" =~ ^3\.([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -lt 11 ]; then
  echo "wheelhouse.sh: --python '$PYVER': expected a CPython version X.Y >= 3.11 (requires-python), e.g. 3.12" >&2
  exit 2
fi
DIR=${1:-$ROOT/wheelhouse}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
TAG=cp${PYVER/./}
PLATFORMS=${WHEELHOUSE_PLATFORMS:-manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 manylinux_2_28_x86_64}
TARGET=(--only-binary=:all: --python-version "$PYVER" --implementation cp --abi "$TAG" --abi abi3 --abi none)
for p in $PLATFORMS; do TARGET+=(--platform "$p"); done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The lock's exact versions, but torch: a placeholder wheel without dependencies stands in for the
# machine's torch in the resolution, so that neither torch (~1 GB per Python) nor its CUDA stack
# (GBs) is downloaded here just for its metadata; it never enters DIR.
TORCH=$(sed -n 's/^torch==//p' "$ROOT/requirements.lock")
grep -v -e '^#' -e '^torch==' "$ROOT/requirements.lock" > "$WORK/constraints.txt"
echo "torch==$TORCH+placeholder" >> "$WORK/constraints.txt"
mkdir -p "$WORK/placeholder"
"$HOST_PY" - "$WORK/placeholder" "$TORCH+placeholder" <<'PY'
import sys, zipfile
folder, version = sys.argv[1:]
info = f"torch-{version}.dist-info"
with zipfile.ZipFile(f"{folder}/torch-{version}-py3-none-any.whl", "w") as whl:
    whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: wheelhouse.sh\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    whl.writestr(f"{info}/RECORD", "")
PY

echo "== the project's wheel" >&2
rm -f "$DIR"/rd_harness-*.whl
"$HOST_PY" -m pip wheel -q --no-deps -w "$DIR" "$ROOT"

echo "== resolving its dependencies for CPython $PYVER ($PLATFORMS)" >&2
"$HOST_PY" -m pip install -q --dry-run --ignore-installed --target "$WORK/target" --report "$WORK/report.json" \
  "${TARGET[@]}" --find-links "$WORK/placeholder" -c "$WORK/constraints.txt" "$DIR"/rd_harness-*.whl
"$HOST_PY" - "$WORK/report.json" > "$WORK/wanted.txt" <<'PY'
import json, re, sys
# torch and its CUDA stack stay the GPU machine's own; the project's wheel is already there.
MACHINE = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|rd-harness)$")
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    name = re.sub(r"[-_.]+", "-", meta["name"]).lower()
    if not MACHINE.match(name):
        print(f"{name}=={meta['version']}")
PY

echo "== downloading $(wc -l < "$WORK/wanted.txt") wheels into $DIR" >&2
"$HOST_PY" -m pip download -q --no-deps "${TARGET[@]}" -d "$DIR" -r "$WORK/wanted.txt"
cp "$WORK/wanted.txt" "$DIR/requirements-cp${PYVER/./}.txt"
echo "wheelhouse $DIR: $(ls "$DIR"/*.whl | wc -l) wheels for CPython $PYVER ($(du -sh "$DIR" | cut -f1)), torch not included" >&2
