#!/usr/bin/env bash
# Run the tests that send signals or kill processes at a moment, N times in a row, beside processes
# that keep every core busy: they wait for states the program reports, so a loaded machine must not
# fail them. Usage, from the project root, with the test environment installed (make test):
#   .ci/under_load.sh [N] [pytest node ids...]     (default: 20 times the timing-dependent tests)
# Prints one line per round and the count of rounds that passed; exit 1 if any failed.
set -u
cd "$(dirname "$0")/.."
n=${1:-20}; shift || true
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  tests=(
    tests/reliability/test_stop_signals.py
    "tests/reliability/test_hardening.py::test_sigterm_is_honoured_within_2_s_in_every_stage"
    tests/reliability/test_resume.py
    tests/reliability/test_shared_work_dir.py
    tests/participant/test_checkpoint.py
    tests/runtime/test_signals.py
    tests/io/test_publish.py
  )
fi
burners=()
for _ in $(seq "$(nproc)"); do python3 -c "while True: pass" & burners+=($!); done
trap 'kill "${burners[@]}" 2>/dev/null' EXIT
passed=0
for i in $(seq "$n"); do
  start=$(date +%s)
  if KERAS_BACKEND=jax .venv/bin/python -m pytest -q -p no:cacheprovider "${tests[@]}" > "/tmp/under_load_$i.log" 2>&1; then
    passed=$((passed + 1)); result=passed
  else
    result="FAILED (/tmp/under_load_$i.log)"
  fi
  echo "round $i: $(tail -1 "/tmp/under_load_$i.log" | tr -d '=') in $(( $(date +%s) - start )) s: $result"
done
echo "$passed of $n rounds passed beside $(nproc) CPU-burning processes"
[ "$passed" = "$n" ]
