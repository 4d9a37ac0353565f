"""mkdocs hook: the generated pages, added at build time so none is committed.

- reference/*.md: the CLI/config reference, from judgeforge.cli's command and config tables
  (judgeforge.reference renders it; a config field without a docstring fails the build).
- results.md: bench/RESULTS.md, which lives beside the benchmarks, outside docs/.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mkdocs.structure.files import File, Files

from judgeforge import cli, reference

log = logging.getLogger("mkdocs.hooks.cli_reference")
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "RESULTS.md"


def on_files(files: Files, config) -> Files:
    pages = reference.pages(cli.COMMANDS, cli.CONFIGS)
    pages["results.md"] = RESULTS.read_text(encoding="utf-8")
    for path, text in pages.items():
        files.append(File.generated(config, path, content=text))
    log.debug("generated %d pages", len(pages))
    return files
