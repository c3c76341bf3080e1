"""`python -m agents`: the `gpu-fleet-agent` command (agents/cli.py); without a subcommand, the
daemon (agents/daemon.py)."""

import sys

from agents.cli import main

if __name__ == "__main__":
    sys.exit(main())
