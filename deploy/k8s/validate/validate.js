#!/usr/bin/env node
// node validate.js MANIFEST.yaml...: validates every object of Loom's Kubernetes manifests offline.
//
// 1. Kubernetes: each object against the OpenAPI schema of its apiVersion and kind (npm
//    kubernetes-models: types and required fields; unknown fields are not detected).
// 2. Loom: what the manifests must agree on (the StatefulSet's headless Service, ports, probes,
//    the entrypoint's rank and coordinator, the termination grace above loomd's shutdown grace).
//
// Exits 0 when every object passes, 1 otherwise, printing each problem with its file and object.
"use strict";

const fs = require("fs");
const path = require("path");
const YAML = require("yaml");

const kGrpcPort = 7070;
const kMetricsPort = 9400;
// --health-listen: the plaintext health service the kubelet's gRPC probes reach (they present no
// certificate, so they cannot probe the API port once it is mutual TLS).
const kHealthPort = 7071;
// loomd's --shutdown-grace default, and the time watchers get after it (daemon/daemon.cc).
const kDefaultShutdownGraceSeconds = 20;
const kServerShutdownSeconds = 5;

const problems = [];
function problem(where, message) {
  problems.push(`${where}: ${message}`);
}

// The model class of an object: kubernetes-models/<apiVersion> exports one class per kind.
function modelClass(object) {
  let group;
  try {
    group = require(`kubernetes-models/${object.apiVersion}`);
  } catch (error) {
    return null;
  }
  return group[object.kind] || null;
}

function validateSchema(where, object) {
  if (typeof object.apiVersion !== "string" || typeof object.kind !== "string") {
    problem(where, "an object without apiVersion and kind");
    return;
  }
  const Model = modelClass(object);
  if (Model === null) {
    problem(where, `unknown kind ${object.kind} in apiVersion ${object.apiVersion}`);
    return;
  }
  try {
    new Model(object).validate();
  } catch (error) {
    problem(where, error.message);
  }
}

// "20s", "1m30s", "500ms" -> seconds (the subset of Go/absl durations the manifests use).
function durationSeconds(text) {
  const units = { h: 3600, m: 60, s: 1, ms: 0.001 };
  let total = 0;
  const pattern = /(\d+(?:\.\d+)?)(ms|h|m|s)/g;
  let consumed = "";
  for (const match of text.matchAll(pattern)) {
    total += Number(match[1]) * units[match[2]];
    consumed += match[0];
  }
  return consumed === text ? total : NaN;
}

function flagValue(text, flag) {
  const match = new RegExp(`--${flag}[ =](\\S+)`).exec(text);
  return match ? match[1] : null;
}

function checkLoomRules(objects) {
  const byKind = (kind) => objects.filter(({ object }) => object.kind === kind);
  const services = byKind("Service");
  const configMaps = byKind("ConfigMap");
  const statefulSets = byKind("StatefulSet");
  if (statefulSets.length === 0) problem("manifests", "no StatefulSet");

  for (const { where, object } of statefulSets) {
    const spec = object.spec || {};
    const podSpec = (spec.template || {}).spec || {};
    if (spec.podManagementPolicy !== "Parallel") {
      problem(where, "spec.podManagementPolicy must be Parallel (workers start with the coordinator)");
    }
    const headless = services.find(
      ({ object: service }) => service.metadata.name === spec.serviceName,
    );
    if (!headless) {
      problem(where, `spec.serviceName '${spec.serviceName}' names no Service of the manifests`);
    } else {
      if (headless.object.spec.clusterIP !== "None") {
        problem(headless.where, "the StatefulSet's Service must be headless (clusterIP: None)");
      }
      const ports = (headless.object.spec.ports || []).map((port) => `${port.name}:${port.port}`);
      for (const wanted of [`grpc:${kGrpcPort}`, `metrics:${kMetricsPort}`]) {
        if (!ports.includes(wanted)) problem(headless.where, `no port ${wanted}`);
      }
    }

    const containers = podSpec.containers || [];
    const loomd = containers.find((container) => container.name === "loomd");
    if (!loomd) {
      problem(where, "no container named loomd");
      continue;
    }
    const containerPorts = (loomd.ports || []).map((port) => `${port.name}:${port.containerPort}`);
    for (const wanted of [`grpc:${kGrpcPort}`, `metrics:${kMetricsPort}`, `health:${kHealthPort}`]) {
      if (!containerPorts.includes(wanted)) problem(where, `container loomd has no port ${wanted}`);
    }
    for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
      const grpc = (loomd[probe] || {}).grpc;
      if (!grpc || grpc.port !== kHealthPort) {
        problem(where, `container loomd: ${probe} must be a grpc probe on port ${kHealthPort}`);
      }
    }

    const script = (loomd.command || []).concat(loomd.args || []).join("\n");
    if (!new RegExp(`--health-listen\\s+0\\.0\\.0\\.0:${kHealthPort}\\b`).test(script)) {
      problem(where, `the entrypoint must pass --health-listen 0.0.0.0:${kHealthPort} (the probes' port)`);
    }
    if (!script.includes("${HOSTNAME##*-}") || !/--node-rank\s+"?\$ordinal"?/.test(script)) {
      problem(where, "the entrypoint must pass --node-rank from the pod ordinal (${HOSTNAME##*-})");
    }
    const coordinator = new RegExp(
      `--coordinator\\s+${object.metadata.name}-0\\.${spec.serviceName}[.:\\w-]*:${kGrpcPort}`,
    );
    if (!coordinator.test(script) || !/if \[ "\$ordinal" != 0 \]/.test(script)) {
      problem(where, `the entrypoint must pass --coordinator ${object.metadata.name}-0.` +
                     `${spec.serviceName}:${kGrpcPort} to ordinals > 0 only`);
    }
    if (/LOOM_[A-Z_]*=|name: LOOM_/.test(JSON.stringify(loomd.env || []))) {
      problem(where, "loomd takes flags, not environment variables");
    }

    // The shutdown grace: from the ConfigMap the container reads, else loomd's default.
    let graceSeconds = kDefaultShutdownGraceSeconds;
    for (const variable of loomd.env || []) {
      const reference = (variable.valueFrom || {}).configMapKeyRef;
      if (!reference) continue;
      const configMap = configMaps.find(({ object: map }) => map.metadata.name === reference.name);
      if (!configMap || !(reference.key in (configMap.object.data || {}))) {
        problem(where, `env ${variable.name}: ConfigMap ${reference.name} key ${reference.key} ` +
                       "is not in the manifests");
        continue;
      }
      const grace = flagValue(configMap.object.data[reference.key], "shutdown-grace");
      if (grace !== null) graceSeconds = durationSeconds(grace);
    }
    const termination = podSpec.terminationGracePeriodSeconds;
    if (!(termination > graceSeconds + kServerShutdownSeconds)) {
      problem(where, `terminationGracePeriodSeconds (${termination}) must be above loomd's ` +
                     `--shutdown-grace (${graceSeconds}s) + ${kServerShutdownSeconds}s`);
    }
    if (!(loomd.resources && loomd.resources.requests && loomd.resources.limits)) {
      problem(where, "container loomd needs resource requests and limits");
    }
    const annotations = (spec.template.metadata || {}).annotations || {};
    if (annotations["prometheus.io/scrape"] !== "true" ||
        annotations["prometheus.io/port"] !== String(kMetricsPort)) {
      problem(where, `the pod template needs prometheus.io/scrape "true" and port "${kMetricsPort}"`);
    }
  }
}

function main(files) {
  if (files.length === 0) {
    console.error("usage: node validate.js MANIFEST.yaml...");
    return 2;
  }
  const objects = [];
  for (const file of files) {
    const documents = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
    documents.forEach((document, index) => {
      const where = `${path.basename(file)} document ${index + 1}`;
      if (document.errors.length > 0) {
        for (const error of document.errors) problem(where, `YAML: ${error.message}`);
        return;
      }
      const object = document.toJS();
      if (object === null) return;
      const name = object.metadata && object.metadata.name;
      const named = `${where} (${object.kind} ${name})`;
      validateSchema(named, object);
      objects.push({ where: named, object });
    });
  }
  if (problems.length === 0) checkLoomRules(objects);
  for (const line of problems) console.error(line);
  if (problems.length > 0) return 1;
  console.log(`validate.js: ${objects.length} objects in ${files.length} files are valid`);
  return 0;
}

process.exitCode = main(process.argv.slice(2));
