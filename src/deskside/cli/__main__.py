"""`python -m deskside.cli ...` runs the `deskside` command.

Ctrl-C is handled before anything else is imported: while the command's modules load it
prints "interrupted" and exits 130 (no traceback); `main` then handles it for the run.
"""

import signal
import sys
from types import FrameType


def _interrupted_while_loading(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("interrupted\n")
    raise SystemExit(130)


signal.signal(signal.SIGINT, _interrupted_while_loading)

from deskside.cli.app import main  # noqa: E402  (after the handler, on purpose)


def run() -> None:
    """The `deskside` console script (the handler above is set while this module loads)."""
    main()


if __name__ == "__main__":
    run()
