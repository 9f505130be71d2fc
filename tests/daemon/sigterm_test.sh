#!/bin/sh
# sigterm_test.sh LOOMD [SIGNAL]: starts loomd on a free port, sends it SIGNAL (TERM by default;
# HUP, INT), and passes when it exits 0 after printing that it stopped.
loomd=$1
signal=${2:-TERM}
output=$(mktemp)
trap 'rm -f "$output"' EXIT
"$loomd" --listen 127.0.0.1:0 --devices cpu:1 --node-name sigterm-test >"$output" 2>&1 &
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
kill -"$signal" "$pid"
wait "$pid"
code=$?
cat "$output"
if [ "$code" -ne 0 ]; then
  echo "sigterm_test.sh: loomd exited with $code after SIG$signal, expected 0" >&2
  exit 1
fi
grep -q "loomd: SIG$signal: shutting down" "$output" ||
  { echo "sigterm_test.sh: no 'SIG$signal: shutting down' line" >&2; exit 1; }
grep -q "loomd: stopped" "$output" || { echo "sigterm_test.sh: no 'stopped' line" >&2; exit 1; }
exit 0
