#!/bin/sh
# expect_exit.sh CODE TEXT COMMAND [ARGUMENT...]
# Runs COMMAND; passes when it exits with CODE and its standard error contains TEXT.
expected_code=$1
expected_text=$2
shift 2
error_file=$(mktemp)
trap 'rm -f "$error_file"' EXIT
"$@" >/dev/null 2>"$error_file"
code=$?
cat "$error_file" >&2
if [ "$code" -ne "$expected_code" ]; then
  echo "expect_exit.sh: '$*' exited with $code, expected $expected_code" >&2
  exit 1
fi
if ! grep -qF -- "$expected_text" "$error_file"; then
  echo "expect_exit.sh: the standard error of '$*' does not contain: $expected_text" >&2
  exit 1
fi
exit 0
