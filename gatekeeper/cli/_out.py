"""Terminal output for the operator's commands: a rich console that does not truncate tables in a pipe."""

from __future__ import annotations

import sys

from rich.console import Console

#: The width of tables written to a pipe or a file (a terminal uses its own width).
PIPE_WIDTH = 160


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr): no highlighting, no colour outside a terminal, tables not truncated."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else PIPE_WIDTH
    return Console(file=stream, highlight=False, soft_wrap=True, width=width)
