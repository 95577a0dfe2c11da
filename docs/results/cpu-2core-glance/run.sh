#!/usr/bin/env bash
# What each lab stage prints a user at a glance: the README's quick fit (2 epochs of 20 training batches) of every
# stage config, its epoch lines and the fit's headline, into stages.txt beside this script. Reads the official
# files from MNISTPERF_SOURCE_ROOT where the machine cannot download them.
#
#     bash docs/results/cpu-2core-glance/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=docs/results/cpu-2core-glance/stages.txt
{
    echo "# $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), load $(cut -d' ' -f1 /proc/loadavg), $(nproc) cores"
    for config in configs/*.yaml; do
        stage=$(basename "$config" .yaml)
        echo
        echo "## $stage"
        python -m mnistperf fit --config "$config" --trainer.max_epochs 2 --trainer.limit_train_batches 20 \
            --trainer.enable_progress_bar false 2>&1 |
            grep -E '^(epoch [0-9]|Verdict: |  (why|fix|could buy): |Per epoch |The rest |mnistperf: )' |
            sed -E 's#lightning_logs/[^ `]*version_[0-9]+#lightning_logs/.../version_N#'
    done
} >"$out"
