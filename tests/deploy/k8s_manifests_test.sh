#!/bin/sh
# k8s_manifests_test.sh SOURCE_DIR WORK_DIR: validates deploy/k8s/*.yaml offline with
# deploy/k8s/validate/ (npm kubernetes-models + yaml). Its packages are installed with `npm ci` into
# WORK_DIR (in the build directory, never the source tree), and again only when the lock changes.
# Skips (exit 77) only when npm is not installed.
source_dir=$1
work_dir=$2
validate_dir="$source_dir/deploy/k8s/validate"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "k8s_manifests_test.sh: SKIP: node and npm are not installed (scripts/install-deps installs them)"
  exit 77
fi
mkdir -p "$work_dir" || exit 1
# installed-lock.json: the lock of the last npm ci that succeeded.
if ! cmp -s "$validate_dir/package-lock.json" "$work_dir/installed-lock.json"; then
  rm -f "$work_dir/installed-lock.json"
  cp "$validate_dir/package.json" "$validate_dir/package-lock.json" "$work_dir/" || exit 1
  echo "k8s_manifests_test.sh: npm ci in $work_dir"
  if ! (cd "$work_dir" && npm ci --no-audit --no-fund --loglevel=error); then
    echo "k8s_manifests_test.sh: npm ci failed (the npm registry must be reachable)" >&2
    exit 1
  fi
  cp "$work_dir/package-lock.json" "$work_dir/installed-lock.json" || exit 1
fi
cp "$validate_dir/validate.js" "$work_dir/" || exit 1
exec node "$work_dir/validate.js" "$source_dir"/deploy/k8s/*.yaml
