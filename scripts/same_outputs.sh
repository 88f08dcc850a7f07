#!/usr/bin/env bash
# Same outputs before and after a change: runs the README quickstart's commands and the committed
# study's import + report on BASE (a commit, checked out with `git worktree add` in a temporary folder)
# and on this working tree, normalises what differs by nature (times, rates, temporary paths, commit
# hashes, dates), and diffs every command's output and the reports' files.
#
#   scripts/same_outputs.sh fbcb67e          # exit 0: identical; 1: the diff is printed
#   KEEP=1 scripts/same_outputs.sh main      # keep the temporary folder (its path is printed)
#
# Needs the sample corpus at ../shared/data/fineweb_edu_sample (as the quickstart does) and the
# project's environment (.venv, or $PYTHON). About 5 minutes on 2 CPU cores (10 tiny runs per side).
set -euo pipefail
BASE=${1:?usage: scripts/same_outputs.sh BASE_COMMIT}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
SHARED=$(cd "$ROOT/.." && pwd)/shared
[ -d "$SHARED/data/fineweb_edu_sample" ] || { echo "same_outputs: no sample corpus at $SHARED/data/fineweb_edu_sample" >&2; exit 2; }
git -C "$ROOT" rev-parse --verify -q "$BASE^{commit}" >/dev/null || { echo "same_outputs: $BASE is not a commit" >&2; exit 2; }
TMP=$(mktemp -d)
cleanup() {
    git -C "$ROOT" worktree remove --force "$TMP/src" 2>/dev/null || true
    if [ -z "${KEEP:-}" ]; then rm -rf "$TMP"; else echo "kept $TMP" >&2; fi
}
trap cleanup EXIT
git -C "$ROOT" worktree add -q --detach "$TMP/src" "$BASE"
ln -s "$SHARED" "$TMP/shared"   # the sample corpus where the quickstart and the grid look for it, seen from $TMP/src

# The quickstart's commands: the README's block after "<!-- quickstart", as tests/tooling/test_readme_quickstart.py runs it.
quickstart() {
    awk '/<!-- quickstart/{f=1; next} f && /^```bash/{b=1; next} b && /^```/{exit} b' "$1/README.md" \
        | grep -v '^\. \.venv/bin/activate' | sed 's/[[:space:]]*#.*$//' | awk '/\\$/{sub(/\\$/, ""); printf "%s", $0; next} {print}'
}

run_side() {  # run_side NAME SOURCE: every command's output and the reports' files into $TMP/NAME
    local name=$1 src=$2 out=$TMP/out/$1 n=0
    mkdir -p "$out"
    export PYTHONPATH=$src HARNESS_RESULTS=$out/results HARNESS_CACHE=$out/cache HARNESS_PROGRESS=lines
    unset HARNESS_SPEC_PATH
    while IFS= read -r line; do
        [ -n "${line// /}" ] || continue
        n=$((n + 1))
        (cd "$src" && eval "\"$PYTHON\" -m harness ${line#harness }") >"$out/cmd$n.out" 2>&1 || echo "exit $?" >>"$out/cmd$n.out"
        echo "$line" >"$out/cmd$n.line"
    done < <(quickstart "$src")
    local study=reports/factorial_study/rd_factorial_study.tar.gz
    [ -f "$src/$study" ] || study=docs/$study   # where a commit before the move (issue 62) keeps it
    (cd "$src" && "$PYTHON" -m harness import "$study" --results "$out/study") >"$out/import.out" 2>&1 || echo "exit $?" >>"$out/import.out"
    (cd "$src" && "$PYTHON" -m harness report --grid rd_factorial_study --results "$out/study") >"$out/report.out" 2>&1 || echo "exit $?" >>"$out/report.out"
    for r in "$out/results/reports/quickstart_tiny" "$out/study/reports/rd_factorial_study"; do
        for f in report.md stats.csv pairs.csv report.html; do
            [ -f "$r/$f" ] && cp "$r/$f" "$out/$(basename "$r").$f"
        done
    done
    echo "$name: $n quickstart commands, import and report done" >&2
}

normalise() {  # the text of a file with what differs by nature replaced by a placeholder
    sed -E -e "s#$TMP/shared#<SHARED>#g" -e "s#$SHARED#<SHARED>#g" \
        -e "s#$TMP/src#<REPO>#g" -e "s#$TMP/out/(base|work)#<OUT>#g" -e "s#$TMP#<TMP>#g" -e "s#$ROOT#<REPO>#g" \
        -e 's/(^|[ (])on [A-Za-z0-9._-]+:[0-9]+/\1on <HOST:PID>/g' -e 's/\(([0-9]+) %\)/(<P> %)/g' \
        -e 's#data:image/png;base64,[A-Za-z0-9+/=]+#<PNG>#g' \
        -e 's/[0-9]+(\.[0-9]+)? ?(s|ms|min|h)\b/<T>/g' -e 's/[0-9][0-9,._]*(\.[0-9]+)? ?(tokens\/s|tok\/s|it\/s)/<RATE>/g' \
        -e "s/($HASHES)[0-9a-f]*(-dirty)?/<COMMIT>/g" \
        -e 's/[0-9.]+ worker-hours/<WH> worker-hours/g' -e '/^[a-z0-9_]+ - [a-z0-9_]+/ s/[0-9.]+$/<WH>/' -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+(Z|[+-][0-9:]+)?/<DATE>/g' "$1"
}

# the code version each side records (a commit, "-dirty" for an uncommitted tree): differs by nature
HASHES="$(git -C "$ROOT" rev-parse --short=7 "$BASE")|$(git -C "$ROOT" rev-parse --short=7 HEAD)"
run_side base "$TMP/src"
run_side work "$ROOT"
status=0
for f in $(cd "$TMP/out/base" && ls -1 | grep -E '\.(out|line|md|csv|html)$'); do
    if ! diff -u --label "base/$f" --label "work/$f" <(normalise "$TMP/out/base/$f") <(normalise "$TMP/out/work/$f"); then
        status=1
    fi
done
[ "$(cd "$TMP/out/base" && ls -1 | sort)" = "$(cd "$TMP/out/work" && ls -1 | sort)" ] || { echo "same_outputs: the two sides wrote different files" >&2; status=1; }
if [ $status -eq 0 ]; then echo "same_outputs: identical outputs on $BASE and the working tree ($(cd "$TMP/out/base" && ls -1 | grep -cE '\.(out|md|csv|html)$') files)"; fi
exit $status
