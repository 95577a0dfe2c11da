"""``python -m mnistperf.gpu_check`` (what scripts/gpu-check runs): the command line."""

from mnistperf.gpu_check.command import main

if __name__ == "__main__":
    raise SystemExit(main())
