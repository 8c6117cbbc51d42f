#!/usr/bin/env bash
# Run the tests that send signals or kill processes at a moment, N times in a row, beside processes
# that keep every core busy: they wait for states the program reports, so a loaded machine must not
# fail them. Usage, from the project root, with the test environment installed (make test):
#   .ci/under_load.sh [N]                      the timing-dependent tests, in two streams side by side
#   .ci/under_load.sh N pytest-args...         one stream of your own
# Each round runs its streams at once (each its own pytest process, so each is also load for the other)
# beside CPU-burning processes (UNDER_LOAD_BURNERS, default one per core), and passes if every stream
# passes. Prints one line per round and the count of rounds that passed; exit 1 if any failed.
# Logs: ${UNDER_LOAD_LOGS:-/tmp}/under_load_<round>_<stream>.log; UNDER_LOAD_FIRST numbers the rounds
# from another value than 1 (a series continued).
set -u
cd "$(dirname "$0")/.."
n=${1:-20}; shift || true
logs=${UNDER_LOAD_LOGS:-/tmp}
if [ $# -gt 0 ]; then
  streams=("$*")
else
  streams=(
    "tests/containers/test_slurm.py tests/reliability/test_stop_signals.py tests/runtime/test_signals.py
     tests/participant/test_checkpoint.py
     tests/reliability/test_resume.py::test_sigkill_then_restart_redoes_only_unfinished_chunks
     tests/reliability/test_resume.py::test_signal_stops_at_once_and_says_how_to_resume"
    "tests/reliability/test_hardening.py::test_sigterm_is_honoured_within_2_s_in_every_stage
     tests/reliability/test_shared_work_dir.py tests/io/test_publish.py"
  )
fi
burners=()
n_burners=${UNDER_LOAD_BURNERS:-$(nproc)}
for _ in $(seq "$n_burners"); do python3 -c "while True: pass" & burners+=($!); done
trap 'kill "${burners[@]}" 2>/dev/null' EXIT
passed=0
for i in $(seq "$n"); do
  start=$(date +%s); pids=()
  r=$((i + ${UNDER_LOAD_FIRST:-1} - 1))  # the round's number (UNDER_LOAD_FIRST: where a series goes on)
  for s in "${!streams[@]}"; do
    # shellcheck disable=SC2086  # a stream is a list of node ids
    KERAS_BACKEND=jax .venv/bin/python -m pytest -q -p no:cacheprovider ${streams[$s]} \
      > "$logs/under_load_${r}_$s.log" 2>&1 &
    pids+=($!)
  done
  result=passed; summary=()
  for s in "${!pids[@]}"; do
    wait "${pids[$s]}" || result="FAILED ($logs/under_load_${r}_$s.log)"
    summary+=("$(tail -1 "$logs/under_load_${r}_$s.log" | tr -d '=' | sed 's/^ *//;s/ *$//')")
  done
  [ "$result" = passed ] && passed=$((passed + 1))
  joined=$(printf '%s; ' "${summary[@]}")
  echo "round $r: ${joined%; } in $(( $(date +%s) - start )) s: $result"
done
echo "$passed of $n rounds passed beside $n_burners CPU-burning process(es) on $(nproc) cores"
[ "$passed" = "$n" ]
