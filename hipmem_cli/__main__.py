"""The console script's entry (`hipmem`, and `python -m hipmem.cli`).

It exists for one reason: a Ctrl-C (or a SIGTERM) while Python is still importing typer, rich
and the libraries must end as the one "interrupted" (or "terminated") line, exit 130 (143),
not as a traceback. So the first thing done, before anything else of hipmem is imported, is to
install a handler for that window; hipmem_cli.main replaces it with the one that unwinds
cleanly once it runs.
"""

from __future__ import annotations

import os
import signal

# The same lines output.interrupted() writes; output itself is not loaded yet at this point.
_STOPPED = {
    signal.SIGINT: (b"Error: interrupted\n", 130),
    signal.SIGTERM: (b"Error: terminated\n", 143),
}


def _interrupted_while_starting(signum: int, frame: object) -> None:
    line, code = _STOPPED[signal.Signals(signum)]
    os.write(2, line)
    os._exit(code)


for _signal in _STOPPED:
    signal.signal(_signal, _interrupted_while_starting)


def main() -> None:
    from .main import main as run

    run()


if __name__ == "__main__":
    main()
