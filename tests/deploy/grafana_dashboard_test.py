#!/usr/bin/python3
"""Checks the Grafana dashboard deploy/grafana/loom.json and its provisioning files offline.

    /usr/bin/python3 tests/deploy/grafana_dashboard_test.py --grafana-dir deploy/grafana \
        --source-dir .

- The dashboard is valid JSON with a title, a uid, a schemaVersion of Grafana 9 or 10, and a
  Prometheus data source variable `datasource`.
- Every panel but rows has the data source `${datasource}`, at least one target, each target an
  expression, unique panel ids and a grid position inside the 24 columns, without overlaps.
- Every expression (targets, and the metric selectors of the template variables' label_values)
  parses as PromQL: with Grafana's variables replaced by concrete values ($__rate_interval by 1m,
  $job by a job name, ...), each becomes a recording rule of a temporary rules file that
  `promtool check rules` reads. One rule group per panel, so that promtool's error names it.
- Every `loom_` metric an expression reads is one that loomd exports: the names are the string
  literals "loom_..." of the non-test C++ sources (daemon/, runtime/, ...); a histogram (built
  with prometheus::BuildHistogram) is read through its _bucket, _sum and _count series only.
- The provisioning files (YAML) name a Prometheus data source and a file dashboard provider.

Exit 77 (ctest: skipped) when promtool is not installed (Debian package prometheus).
"""

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

PROMTOOL_TIMEOUT = 60
# Grafana 9.0 writes schemaVersion 36, Grafana 10.4 writes 39.
SCHEMA_VERSIONS = range(36, 40)
GRID_COLUMNS = 24
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's global variables, replaced by values of their kind before parsing.
GLOBAL_VARIABLES = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
    "__interval_ms": "60000",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
# The value a dashboard variable takes in the parsed copy (inside a label matcher).
VARIABLE_VALUE = "loomd"
# Directories of the source tree whose C++ is not loomd's (tests, benchmarks, build outputs).
NOT_DAEMON_SOURCES = {"tests", "bench", "build", "third_party", "python", ".git"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


class Failures:
    """Collects the problems found, each naming its culprit, so that one run reports them all."""

    def __init__(self):
        self.messages = []

    def add(self, message):
        self.messages.append(message)
        sys.stdout.flush()
        print(f"grafana_dashboard_test.py: {message}", file=sys.stderr)


def load_dashboard(path, failures):
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except json.JSONDecodeError as error:
        failures.add(f"{path}: not valid JSON: {error}")
    except OSError as error:
        failures.add(f"{path}: cannot be read: {error}")
    return None


def flatten_panels(dashboard):
    """The dashboard's panels, those inside collapsed rows included, rows themselves included."""
    for panel in dashboard.get("panels", []):
        yield panel
        for inner in panel.get("panels", []) or []:
            yield inner


def panel_name(panel):
    return f"panel {panel.get('id')} \"{panel.get('title', '(no title)')}\""


def check_header(path, dashboard, failures):
    for key in ("title", "uid"):
        if not isinstance(dashboard.get(key), str) or not dashboard[key]:
            failures.add(f"{path}: the dashboard has no {key}")
    if dashboard.get("schemaVersion") not in SCHEMA_VERSIONS:
        failures.add(f"{path}: schemaVersion {dashboard.get('schemaVersion')!r} is not one of "
                     f"Grafana 9 or 10 ({SCHEMA_VERSIONS.start}..{SCHEMA_VERSIONS.stop - 1})")
    variables = {variable.get("name"): variable
                 for variable in dashboard.get("templating", {}).get("list", [])}
    datasource = variables.get("datasource")
    if datasource is None or datasource.get("type") != "datasource" or \
            datasource.get("query") != "prometheus":
        failures.add(f"{path}: no template variable 'datasource' of type datasource choosing a "
                     "prometheus data source")
    return variables


def check_panels(path, dashboard, failures):
    """Structure of every panel; returns [(rule group name, [(refId, expression)])]."""
    seen_ids = {}
    occupied = {}
    expressions = []
    for panel in flatten_panels(dashboard):
        name = panel_name(panel)
        panel_id = panel.get("id")
        if not isinstance(panel_id, int):
            failures.add(f"{path}: {name} has no integer id")
        elif panel_id in seen_ids:
            failures.add(f"{path}: {name} has the id of {seen_ids[panel_id]}")
        else:
            seen_ids[panel_id] = name
        check_grid_position(path, panel, name, occupied, failures)
        if panel.get("type") == "row":
            continue
        if panel.get("datasource") != DATASOURCE:
            failures.add(f"{path}: {name} has the data source {panel.get('datasource')!r}, not "
                         f"{DATASOURCE!r}")
        targets = panel.get("targets") or []
        if not targets:
            failures.add(f"{path}: {name} has no target")
        panel_expressions = []
        for target in targets:
            reference = target.get("refId", "?")
            if target.get("datasource", DATASOURCE) != DATASOURCE:
                failures.add(f"{path}: {name} target {reference} has the data source "
                             f"{target.get('datasource')!r}, not {DATASOURCE!r}")
            expression = target.get("expr")
            if not isinstance(expression, str) or not expression.strip():
                failures.add(f"{path}: {name} target {reference} has no expression (expr)")
                continue
            panel_expressions.append((reference, expression))
        references = [reference for reference, _ in panel_expressions]
        if len(set(references)) != len(references):
            failures.add(f"{path}: {name} has two targets with the same refId: {references}")
        expressions.append((name, panel_expressions))
    return expressions


def check_grid_position(path, panel, name, occupied, failures):
    grid = panel.get("gridPos") or {}
    if not all(isinstance(grid.get(key), int) for key in ("h", "w", "x", "y")):
        failures.add(f"{path}: {name} has no complete gridPos (h, w, x, y): {grid!r}")
        return
    if grid["x"] < 0 or grid["w"] <= 0 or grid["h"] <= 0 or grid["x"] + grid["w"] > GRID_COLUMNS:
        failures.add(f"{path}: {name} lies outside the {GRID_COLUMNS} columns: {grid!r}")
        return
    for row in range(grid["y"], grid["y"] + grid["h"]):
        for column in range(grid["x"], grid["x"] + grid["w"]):
            other = occupied.setdefault((row, column), name)
            if other != name:
                failures.add(f"{path}: {name} overlaps {other} at row {row}, column {column}")
                return


def variable_expressions(path, variables, failures):
    """The metric selectors the query variables read (label_values(SELECTOR, LABEL))."""
    expressions = []
    for name, variable in variables.items():
        if variable.get("type") != "query":
            continue
        if variable.get("datasource") != DATASOURCE:
            failures.add(f"{path}: variable '{name}' has the data source "
                         f"{variable.get('datasource')!r}, not {DATASOURCE!r}")
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        match = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*",
                             query or "")
        if match is None:
            failures.add(f"{path}: variable '{name}' does not query label_values(METRIC, LABEL): "
                         f"{query!r}")
            continue
        expressions.append((f"variable {name}", [("query", match.group(1))]))
    return expressions


def substitute_variables(expression, dashboard_variables):
    """The expression with Grafana's variables replaced by concrete values, or an error."""
    unknown = []

    def value(match):
        name = match.group(1) or match.group(2) or match.group(3)
        if name in GLOBAL_VARIABLES:
            return GLOBAL_VARIABLES[name]
        if name in dashboard_variables:
            return VARIABLE_VALUE
        unknown.append(name)
        return match.group(0)

    # ${name}, ${name:format}, [[name]] and $name.
    substituted = re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", value, expression)
    if unknown:
        return None, f"uses variables the dashboard does not define: {', '.join(unknown)}"
    return substituted, None


def exported_metrics(source_directory):
    """(names, histograms): the "loom_..." string literals of loomd's C++ sources."""
    names = set()
    histograms = set()
    literal = re.compile(r'"(loom_[a-z0-9_]+)"')
    histogram = re.compile(r'BuildHistogram\(\)\s*\.Name\(\s*"(loom_[a-z0-9_]+)"\s*\)')
    for root, directories, files in os.walk(source_directory):
        if root == source_directory:
            directories[:] = [directory for directory in directories
                              if directory not in NOT_DAEMON_SOURCES and
                              not directory.startswith("build")]
        for file_name in files:
            if not file_name.endswith((".cc", ".h")):
                continue
            with open(os.path.join(root, file_name), encoding="utf-8", errors="replace") as file:
                text = file.read()
            names.update(literal.findall(text))
            histograms.update(histogram.findall(text))
    return names, histograms


def metric_names(expression):
    """The loom_ metric names an expression reads (string literals removed first)."""
    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expression)
    return set(re.findall(r"(?<![A-Za-z0-9_:])(loom_[A-Za-z0-9_]+)(?![A-Za-z0-9_:])",
                          without_strings))


def check_metric_name(name, exported, histograms):
    """None when loomd exports `name`, else why not."""
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[:-len(suffix)] in histograms:
            return None
    if name in histograms:
        return (f"{name} is a histogram: read {name}_bucket, {name}_sum or {name}_count")
    if name in exported:
        return None
    return f"loomd exports no metric {name}"


def check_expressions(path, groups, dashboard_variables, exported, histograms, failures):
    """Checks the metric names; returns the rules file's text for promtool."""
    lines = ["groups:"]
    used = set()
    numbers = itertools.count(1)
    for group_name, expressions in groups:
        rules = []
        for reference, expression in expressions:
            substituted, error = substitute_variables(expression, dashboard_variables)
            if error is not None:
                failures.add(f"{path}: {group_name} target {reference} {error}: {expression}")
                continue
            for name in sorted(metric_names(substituted)):
                used.add(name)
                problem = check_metric_name(name, exported, histograms)
                if problem is not None:
                    failures.add(f"{path}: {group_name} target {reference}: {problem}")
            # Unique in the file (promtool's lint counts equal names as duplicate rules); the
            # group's name names the panel.
            record = f"loom_dashboard:expression_{next(numbers)}"
            rules.append(f"      - record: {record}\n        expr: {json.dumps(substituted)}")
        if rules:
            lines.append(f"  - name: {json.dumps(f'{path}: {group_name}')}\n    rules:")
            lines.extend(rules)
    unused = sorted(name for name in exported | histograms
                    if name not in used and
                    not any(name + suffix in used for suffix in HISTOGRAM_SUFFIXES))
    if unused:
        print(f"grafana_dashboard_test.py: note: exported but on no panel: {', '.join(unused)}")
    return "\n".join(lines) + "\n"


def run_promtool(rules_text, failures):
    with tempfile.TemporaryDirectory() as directory:
        rules_path = os.path.join(directory, "dashboard_rules.yml")
        with open(rules_path, "w", encoding="utf-8") as file:
            file.write(rules_text)
        try:
            result = subprocess.run(["promtool", "check", "rules", "--lint-fatal", rules_path],
                                    capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT)
        except subprocess.TimeoutExpired:
            failures.add(f"promtool check rules did not finish in {PROMTOOL_TIMEOUT} s")
            return
        print(result.stdout, end="")
        if result.returncode != 0:
            failures.add("an expression does not parse as PromQL (promtool check rules):\n" +
                         result.stderr)
        else:
            print(result.stderr, end="", file=sys.stderr)


def check_provisioning(directory, failures):
    try:
        import yaml  # Debian's python3-yaml.
    except ImportError:
        print("grafana_dashboard_test.py: python3-yaml is not installed: provisioning files not "
              "checked")
        return

    def load(relative):
        path = os.path.join(directory, "provisioning", relative)
        try:
            with open(path, encoding="utf-8") as file:
                return path, yaml.safe_load(file)
        except (OSError, yaml.YAMLError) as error:
            failures.add(f"{path}: cannot be read as YAML: {error}")
            return path, None

    path, datasources = load("datasources/loom.yml")
    if datasources is not None:
        kinds = [source.get("type") for source in datasources.get("datasources") or []]
        if datasources.get("apiVersion") != 1 or "prometheus" not in kinds:
            failures.add(f"{path}: no apiVersion 1 with a data source of type prometheus")
    path, dashboards = load("dashboards/loom.yml")
    if dashboards is not None:
        providers = dashboards.get("providers") or []
        if dashboards.get("apiVersion") != 1 or not any(
                provider.get("type") == "file" and (provider.get("options") or {}).get("path")
                for provider in providers):
            failures.add(f"{path}: no apiVersion 1 with a provider of type file and an "
                         "options.path")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grafana-dir", required=True, help="deploy/grafana")
    parser.add_argument("--source-dir", required=True, help="the source tree's root")
    arguments = parser.parse_args()
    if shutil.which("promtool") is None:
        print("grafana_dashboard_test.py: SKIP: promtool is not installed (Debian package "
              "prometheus)")
        return 77
    failures = Failures()
    exported, histograms = exported_metrics(arguments.source_dir)
    if not exported:
        failures.add(f"no \"loom_...\" metric name in the C++ under {arguments.source_dir}")
    dashboards = sorted(name for name in os.listdir(arguments.grafana_dir)
                        if name.endswith(".json"))
    if not dashboards:
        failures.add(f"no dashboard (*.json) in {arguments.grafana_dir}")
    rules = []
    for name in dashboards:
        path = os.path.join(arguments.grafana_dir, name)
        dashboard = load_dashboard(path, failures)
        if dashboard is None:
            continue
        variables = check_header(path, dashboard, failures)
        groups = check_panels(path, dashboard, failures)
        groups += variable_expressions(path, variables, failures)
        rules.append(check_expressions(path, groups, set(variables), exported, histograms,
                                       failures))
        print(f"grafana_dashboard_test.py: {path}: {sum(len(group) for _, group in groups)} "
              f"expressions in {len(groups)} panels and variables")
    if rules:
        run_promtool("groups:\n" + "".join(text.split("\n", 1)[1] for text in rules), failures)
    check_provisioning(arguments.grafana_dir, failures)
    if failures.messages:
        print(f"grafana_dashboard_test.py: FAILED: {len(failures.messages)} problem(s)",
              file=sys.stderr)
        return 1
    print("grafana_dashboard_test.py: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
