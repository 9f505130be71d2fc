#!/bin/sh
# sigterm_test.sh LOOMD [SIGNAL [LOOMCTL]]: starts loomd on a free port, sends it SIGNAL (TERM by
# default; HUP, INT), and passes when it exits 0 after printing that it stopped. With LOOMCTL, a
# job whose one op sleeps for 10^12 us runs when the signal comes: loomd (--shutdown-grace 1s)
# must still be gone within the grace plus a bound (the job's abort, then the node agent's 5 s),
# here 30 s, whether the sleep ends when aborted or is abandoned.
loomd=$1
signal=${2:-TERM}
loomctl=$3
output=$(mktemp)
job=$(mktemp --suffix=.pbtxt)
trap 'rm -f "$output" "$job"' EXIT
"$loomd" --listen 127.0.0.1:0 --devices cpu:1 --node-name sigterm-test --shutdown-grace 1s \
  >"$output" 2>&1 &
pid=$!
tries=0
until grep -q "listening on" "$output"; do
  tries=$((tries + 1))
  if [ "$tries" -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
    cat "$output" >&2
    echo "sigterm_test.sh: loomd did not start" >&2
    kill -KILL "$pid" 2>/dev/null
    exit 1
  fi
  sleep 0.1
done
if [ -n "$loomctl" ]; then
  address=$(sed -n "s/.*listening on \([^ ]*\) .*/\1/p" "$output" | head -n 1)
  cat >"$job" <<'JOB'
name: "sleeps-for-ever"
inputs { name: "x" shape: [ 4 ] random_normal { std: 1 } }
ops {
  name: "slept"
  type: "sleep"
  inputs: "x"
  outputs: "slept"
  attributes { key: "microseconds" value { int_value: 1000000000000 } }
}
fetch: "slept"
placement { devices: "node0/cpu:0" }
JOB
  id=$("$loomctl" submit "$job" --coordinator "$address") ||
    { cat "$output" >&2; echo "sigterm_test.sh: the job was not submitted" >&2; kill -KILL "$pid"; exit 1; }
  tries=0
  until "$loomctl" status "$id" --coordinator "$address" 2>/dev/null | grep -qi "running"; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ]; then
      echo "sigterm_test.sh: $id did not start running" >&2
      kill -KILL "$pid"
      exit 1
    fi
    sleep 0.1
  done
fi
kill -"$signal" "$pid"
# A watchdog: loomd must be gone within 30 s of the signal (else it is killed: exit code 137).
# Its output goes nowhere, so that a sleep left behind holds no pipe of the test's.
( sleep 30; kill -KILL "$pid" ) >/dev/null 2>&1 &
watchdog=$!
wait "$pid"
code=$?
kill "$watchdog" 2>/dev/null
cat "$output"
[ "$code" -ne 137 ] || echo "sigterm_test.sh: loomd still ran 30 s after SIG$signal" >&2
if [ "$code" -ne 0 ]; then
  echo "sigterm_test.sh: loomd exited with $code after SIG$signal, expected 0" >&2
  exit 1
fi
grep -q "loomd: SIG$signal: shutting down" "$output" ||
  { echo "sigterm_test.sh: no 'SIG$signal: shutting down' line" >&2; exit 1; }
grep -q "loomd: stopped" "$output" || { echo "sigterm_test.sh: no 'stopped' line" >&2; exit 1; }
exit 0
