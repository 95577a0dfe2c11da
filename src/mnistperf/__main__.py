"""``python -m mnistperf``: the command line."""

from mnistperf.cli import main

if __name__ == "__main__":
    main()
