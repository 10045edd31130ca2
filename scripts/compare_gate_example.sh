#!/usr/bin/env bash
# The regression gate of docs/compare.md on the bundled example: a baseline run, a deliberately
# worse one (a 300-token context), and `ragdx compare` with the gate. The worse run must fail the
# gate (exit 1) and name context; the baseline compared with itself must pass (exit 0, no difference).
# Usage: scripts/compare_gate_example.sh [RAGDX]   (default: ragdx on PATH; .ci/run passes .venv/bin/ragdx)
set -uo pipefail
RAGDX=${1:-ragdx}
work=$(mktemp -d /tmp/ragdx-gate.XXXXXX)
trap 'rm -rf "$work"' EXIT
python=$(dirname "$(command -v "$RAGDX")")/python  # the interpreter ragdx is installed in
example=$("$python" -c 'from ragdx.examples import example_dir; print(example_dir())') \
    || { echo "compare_gate_example: cannot find the bundled example with $python" >&2; exit 2; }
set -e
"$RAGDX" ingest --store "$work/store.db" "$example/manifest.jsonl" --quiet >/dev/null
"$RAGDX" run --store "$work/store.db" --queries "$example/queries.jsonl" --out "$work/base" --quiet >/dev/null
"$RAGDX" run --store "$work/store.db" --queries "$example/queries.jsonl" --out "$work/worse" --quiet \
    --set context.budget_tokens=300 >/dev/null
set +e
# the gate a CI job would run: fails when success drops by more than 2 points, when evidence at the
# context drops by more than 3 points, or when hallucinations rise at all
"$RAGDX" compare "$work/base" "$work/worse" --fail-on success:-0.02 --fail-on complete@context:-0.03 \
    --fail-on hallucination:+0 --junit "$work/gate.xml" >"$work/worse.md" 2>"$work/worse.err"
worse=$?
"$RAGDX" compare "$work/base" "$work/base" --fail-on success:-0.02 >"$work/same.md" 2>&1
same=$?
status=0
if [ "$worse" -ne 1 ]; then echo "compare_gate_example: the worse run passed the gate (exit $worse)" >&2; status=1; fi
if ! grep -q "NEW loses evidence at context" "$work/worse.md"; then
    echo "compare_gate_example: the readings do not name context" >&2; cat "$work/worse.md" >&2; status=1; fi
if [ "$same" -ne 0 ] || ! grep -q "^no difference$" "$work/same.md"; then
    echo "compare_gate_example: a run compared with itself did not pass with no difference (exit $same)" >&2; status=1; fi
[ "$status" -eq 0 ] && echo "compare_gate_example: the worse run failed the gate at context; the same run passed"
exit $status
