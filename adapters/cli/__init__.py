"""The command line: `convstore [--db URL] COMMAND [ARGS]`.

Thin by design: each command is one function that calls the library and hands lines to a
`Renderer`, registered in `COMMANDS` by the `command` decorator; every byte written to
stdout and stderr (argparse's usage and errors included) is sanitized on the way.

Exit codes: 0 success; 2 a usage error, a `ConvstoreError` or stdout that cannot be
written, such as a full disk (one line on stderr, no traceback); 1 anything unexpected (a
short line; `CONVSTORE_DEBUG=1` adds the sanitized traceback); 3 a response ended `failed`
or `abandoned`; 4 a stored response id arrived with different content; 5 `verify` found a
changed, removed or reordered event (`audit`: stored events that cannot be read); 128 + N
stopped by signal N: 130 for SIGINT (Ctrl-C), 143 for SIGTERM (a command that serves, such
as `project --follow`, stops gracefully on either and exits 0). The README's table is the
contract.

`demo` runs the main job end to end through the command line (`make demo`). The program
itself is `program`; this package's `main` loads it on first use, so that `run` (the
`convstore` script) handles Ctrl-C from its first instant: while the commands' modules
load, SIGINT and SIGTERM exit 130 and 143 with one line, never a traceback.

May import: everything in convstore; nothing imports it.
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # not typing's: importing typing here would widen the window below
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType
    from typing import NoReturn


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    from convstore.adapters.cli.program import main as run_program

    return run_program(argv)


def _starting(signum: int, frame: FrameType | None) -> NoReturn:
    stopped = "interrupted" if signum == signal.SIGINT else "terminated"
    os.write(2, f"convstore: {stopped}\n".encode())
    raise SystemExit(128 + signum)


def run() -> NoReturn:
    """The `convstore` program: run the command line with `sys.argv` and exit with its code."""
    signal.signal(signal.SIGINT, _starting)
    signal.signal(signal.SIGTERM, _starting)
    from convstore.adapters.cli import program

    # `main` installs its own handlers first thing, and leaves the signals ignored once
    # the command's outcome is decided: a late signal changes nothing.
    sys.exit(program.main(restore_signals=False))
