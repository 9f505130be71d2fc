#!/bin/sh
# run_gpu_plan.sh LOOMCTL PLAN: runs a plan with CUDA devices. On a machine with a GPU
# (nvidia-smi lists one) it must succeed; on one without, it must fail with exit code 1 saying
# that no CUDA device is usable, or that this build has no CUDA backend.
loomctl=$1
plan=$2
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  exec "$loomctl" run-plan "$plan"
fi
exec sh "$(dirname "$0")/expect_exit.sh" 1 "uses node0/cuda:0, but" "$loomctl" run-plan "$plan"
