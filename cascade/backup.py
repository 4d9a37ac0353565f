"""`judgeforge cascade store backup SRC DST`: copy a judgment store, safely while servers write to it.

A store in use is more than its main file: its newest rows are in `SRC-wal` until SQLite checkpoints
them, so `cp SRC DST` alone loses them (the server and the builder then refuse the copy by name). This
copies with SQLite's online backup API instead: one consistent snapshot, WAL included, into a new 0600
file that is quick_checked and never replaces an existing one (`data/store.py`, `backup`).
"""

from __future__ import annotations

import argparse
import logging

from judgeforge.data.store import StoreError, backup

log = logging.getLogger(__name__)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="judgeforge cascade store backup",
                                description="Copy a judgment store (in use or not) with SQLite's online backup API.")
    p.add_argument("src", help="the store to copy (its -wal, when there is one, is read too)")
    p.add_argument("dst", help="the new file (refused if it exists)")
    p.add_argument("--accept-missing-wal", action="store_true",
                   help="copy a store that was itself copied without its -wal, as it is (its newest rows are lost)")
    args = p.parse_args(argv)
    try:
        rows = backup(args.src, args.dst, accept_missing_wal=args.accept_missing_wal)
    except StoreError as e:
        log.error("cannot back up: %s", e)
        return 2
    log.info("backed up %d gradings from %s to %s", rows, args.src, args.dst)
    return 0
