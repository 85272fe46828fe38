#!/usr/bin/env bash
# The audit step of action.yml: `python -m specaudit run` on the action's inputs, every report in one folder, and
# the step's outputs (exit-code, status, report) in $GITHUB_OUTPUT. specaudit itself writes the annotations and the
# job summary ($GITHUB_ACTIONS, $GITHUB_STEP_SUMMARY). Exits with specaudit's exit code; 4 for an unusable input.
#   SPECAUDIT_TARGET      the verifier (required)
#   SPECAUDIT_SCENARIOS   scenario names, tag:TAG or files, separated by spaces (empty: the default suite)
#   SPECAUDIT_EXTRA_ARGS  more `specaudit run` arguments, split as a shell would (quotes respected), never evaluated
#   SPECAUDIT_REPORT_DIR  where the reports go (default specaudit-report)
set -uo pipefail

target="${SPECAUDIT_TARGET:-}"
if [ -z "$target" ]; then
    echo "specaudit action: error: the input 'target' is empty; give the verifier (pkg.mod:attr, path/to/file.py:attr," \
         "an alias such as reference, or ENGINE@VERSION)" >&2
    exit 4
fi
out="${SPECAUDIT_REPORT_DIR:-specaudit-report}"
args=(run "$target" --json "$out/specaudit.json" --junit "$out/specaudit.xml" --html "$out/")
read -r -a names <<< "${SPECAUDIT_SCENARIOS:-}"
for name in "${names[@]}"; do
    args+=(-s "$name")
done

words="$(mktemp)"
trap 'rm -f "$words"' EXIT
split='import shlex, sys
try:
    sys.stdout.write("".join(w + "\0" for w in shlex.split(sys.argv[1])))
except ValueError as exc:
    sys.exit(f"specaudit action: error: the input extra-args cannot be split into words ({exc}): {sys.argv[1]!r}")'
python -c "$split" "${SPECAUDIT_EXTRA_ARGS:-}" > "$words" || exit 4
mapfile -d '' -t extra < "$words"

rm -f "$out/specaudit.json" "$out/specaudit.xml"  # a status read from an earlier run's file would be a lie
python -m specaudit "${args[@]}" "${extra[@]}"
code=$?

status=none
if [ -f "$out/specaudit.json" ]; then
    status="$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["status"])' "$out/specaudit.json")" || status=none
fi
if [ -n "${GITHUB_OUTPUT:-}" ]; then
    { echo "exit-code=$code"; echo "status=$status"; echo "report=$out"; } >> "$GITHUB_OUTPUT"
fi
exit "$code"
