"""How judgeforge logs: one line format on stderr for every command and for the processes it starts.

Core, so that every stage's entry point (serve, train, the demo) and the engine watchdog set it up
the same way without importing the CLI above them.
"""

from __future__ import annotations

import logging
import sys

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging() -> None:
    """Status and progress of every command: INFO and up to stderr (once; kept if already set up)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per HTTP request otherwise
