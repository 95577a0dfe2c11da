#!/usr/bin/env bash
# The outputs docs/timing.md and docs/diagnose.md quote, into examples.txt beside this script: the README's quick
# fit of v2_pinned with its `mnistperf report`, the diagnosis example made input-bound (`--slow-ms 2`), and the
# headline of a fit with a callback that spends 1 ms a step (../cpu-2core-culprit). Reads
# the official files from MNISTPERF_SOURCE_ROOT where the machine cannot download them.
#
#     bash docs/results/cpu-2core-glance/examples.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=docs/results/cpu-2core-glance/examples.txt
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
{
    echo "# $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), load $(cut -d' ' -f1 /proc/loadavg), $(nproc) cores"
    echo
    echo "## python -m mnistperf fit --config configs/v2_pinned.yaml --trainer.max_epochs 2 --trainer.limit_train_batches 20"
    python -m mnistperf fit --config configs/v2_pinned.yaml --trainer.max_epochs 2 --trainer.limit_train_batches 20 \
        --trainer.enable_progress_bar false --trainer.logger.init_args.save_dir "$logs" 2>&1 |
        grep -E '^(epoch [0-9]|Verdict: |  (why|fix|could buy): |Per epoch |The rest )'
    echo
    echo "## mnistperf report RUN"
    python -m mnistperf report "$(dirname "$(find "$logs" -name timing.json | head -1)")" 2>&1
    echo
    echo "## python examples/diagnose_your_run.py --slow-ms 2"
    python examples/diagnose_your_run.py --slow-ms 2 --out "$logs/example" 2>&1 |
        grep -E '^(epoch [0-9]|sample audit|Verdict: |  (why|fix|could buy): |Per epoch |The rest )'
    echo
    echo "## python docs/results/cpu-2core-culprit/check.py --show callback"
    python docs/results/cpu-2core-culprit/check.py --show callback 2>&1 | grep -E '^(Verdict: |  (why|fix|could buy): )'
} | sed -E "s#$logs#RUN#g" >"$out"
