"""``python -m mnistperf``: the command line."""

import sys

try:
    from mnistperf.cli import main
except KeyboardInterrupt:  # Ctrl-C before the command line is read: nothing begun
    print("mnistperf: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    main()
