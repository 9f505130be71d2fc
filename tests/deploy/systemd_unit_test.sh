#!/bin/sh
# systemd_unit_test.sh UNIT LOOMD: `systemd-analyze verify` on a copy of UNIT whose ExecStart runs
# the built LOOMD (verify checks that the binary exists). Fails on a nonzero exit or on any line
# of stderr that mentions the unit (systemd reports unknown keys and bad values only as warnings).
unit=$1
loomd=$2
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd_unit_test.sh: SKIP: systemd-analyze is not installed (Debian package systemd)"
  exit 77
fi
if [ ! -x "$loomd" ]; then
  echo "systemd_unit_test.sh: $loomd is not an executable (build the loomd target)" >&2
  exit 1
fi
directory=$(mktemp -d)
trap 'rm -rf "$directory"' EXIT
name=$(basename "$unit")
sed "s|^ExecStart=/usr/local/bin/loomd |ExecStart=$loomd |" "$unit" >"$directory/$name"
if ! grep -q "^ExecStart=$loomd " "$directory/$name"; then
  echo "systemd_unit_test.sh: $unit has no 'ExecStart=/usr/local/bin/loomd ...' line" >&2
  exit 1
fi
# SYSTEMD_LOG_LEVEL=warning keeps verify's own info lines out; the unit file's problems remain.
SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$directory/$name" 2>"$directory/stderr"
code=$?
cat "$directory/stderr" >&2
if [ "$code" -ne 0 ]; then
  echo "systemd_unit_test.sh: systemd-analyze verify exited with $code" >&2
  exit 1
fi
if grep -q "$name" "$directory/stderr"; then
  echo "systemd_unit_test.sh: systemd-analyze verify reported problems with $name (above)" >&2
  exit 1
fi
echo "systemd_unit_test.sh: $name verified"
exit 0
