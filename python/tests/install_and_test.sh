#!/usr/bin/env bash
# install_and_test.sh SOURCE_DIR BUILD_DIR: `pip install ./python` into a fresh venv (with
# --system-site-packages, offline: --no-build-isolation), from a copy of python/ and proto/ so
# that the checkout stays clean, then the package's tests against that install.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: install_and_test.sh SOURCE_DIR BUILD_DIR" >&2
  exit 2
fi
source_dir=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/loom-python-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
cp -r "$source_dir/proto" "$work/src/proto"
(cd "$source_dir" && tar --exclude=build --exclude='*.egg-info' --exclude=__pycache__ \
  --exclude=_proto -cf - python) | tar -xf - -C "$work/src"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
timeout 300 "$work/venv/bin/pip" install --quiet --no-build-isolation --no-index "$work/src/python"
cd "$work"
"$work/venv/bin/python" -c 'import loom.protos; assert loom.protos._PACKAGE == "loom._proto"'
exec timeout 300 "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$work/src/python/tests" \
  --loom-source-dir "$source_dir" --loom-build-dir "$build_dir"
