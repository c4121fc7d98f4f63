"""The console script's entry (`hipmem`, and `python -m hipmem.cli`).

It exists for one reason: a Ctrl-C while Python is still importing typer, rich and the
libraries must end as the one "interrupted" line, exit 130, not as a traceback. So the first
thing done, before anything else of hipmem is imported, is to install a handler for that
window; hipmem_cli.main replaces it with the one that unwinds cleanly once it runs.
"""

from __future__ import annotations

import os
import signal

# The same line output.interrupted() writes; output itself is not loaded yet at this point.
_INTERRUPTED = b"Error: interrupted\n"


def _interrupted_while_starting(signum: int, frame: object) -> None:
    os.write(2, _INTERRUPTED)
    os._exit(130)


signal.signal(signal.SIGINT, _interrupted_while_starting)


def main() -> None:
    from .main import main as run

    run()


if __name__ == "__main__":
    main()
