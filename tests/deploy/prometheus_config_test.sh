#!/bin/sh
# prometheus_config_test.sh PROMETHEUS_DIR: promtool on deploy/prometheus/: `check config` on every
# prometheus*.yml, `check rules` on the rules and `test rules` on their tests.
#
# Debian's promtool is built without Kubernetes service discovery ("field kubernetes_sd_configs
# not found"): there, the Kubernetes configuration is checked with its kubernetes_sd_configs block
# replaced by a static target, so that everything else in it (relabelling, rules) is still checked.
directory=$1
if ! command -v promtool >/dev/null 2>&1; then
  echo "prometheus_config_test.sh: SKIP: promtool is not installed (Debian package prometheus)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
cd "$directory" || exit 1
# promtool checks that a tls_config's files exist: the configurations name them under
# /etc/prometheus/loom/, which the copies checked here name under $work/tls/ (empty files).
mkdir -p "$work/tls" "$work/configs"
for config in prometheus*.yml; do
  for file in $(grep -o '/etc/prometheus/loom/[A-Za-z0-9._-]*' "$config"); do
    : >"$work/tls/$(basename "$file")"
  done
  sed "s|/etc/prometheus/loom/|$work/tls/|g" "$config" >"$work/configs/$config"
done
cp ./*rules*.yml "$work/configs/"
cd "$work/configs" || exit 1
for config in prometheus*.yml; do
  if promtool check config "$config" >"$work/output" 2>&1; then
    cat "$work/output"
    continue
  fi
  if ! grep -q "field kubernetes_sd_configs not found" "$work/output"; then
    cat "$work/output" >&2
    echo "prometheus_config_test.sh: $config is not valid" >&2
    status=1
    continue
  fi
  echo "prometheus_config_test.sh: this promtool lacks Kubernetes discovery;" \
       "checking $config with a static target instead of kubernetes_sd_configs"
  # Drops the kubernetes_sd_configs block (the lines indented deeper than its key) and puts a
  # static_configs block in its place, in a copy next to the rule files it names.
  awk '
    /^    kubernetes_sd_configs:/ { skipping = 1; print "    static_configs:"; print "      - targets: [\"loom-0.loom:9400\"]"; next }
    skipping && /^     / { next }
    { skipping = 0; print }
  ' "$config" >"$work/$config"
  cp ./*rules*.yml "$work/"
  if ! promtool check config "$work/$config"; then
    echo "prometheus_config_test.sh: $config (static copy) is not valid" >&2
    status=1
  fi
done
for rules in *_rules.yml; do
  promtool check rules "$rules" || status=1
done
for tests in *_rules_test.yml; do
  promtool test rules "$tests" || status=1
done
exit $status
