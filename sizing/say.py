"""How the sizing library speaks while it works: lines on the way (a log read, a release
fetched, a notice) and progress. The library never prints: the CLI passes its own `Say`
(hipmem_cli/output/ draws and colours); a Python caller gets silence by default."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from hipmem._core.progress import ProgressCallback, no_progress


def _silent(text: str) -> None:
    return None


@contextmanager
def _no_bar(title: str) -> Iterator[ProgressCallback]:
    yield no_progress


Bar = Callable[[str], AbstractContextManager[ProgressCallback]]


@dataclass
class Say:
    """`info`: what was read or done; `warning`: what the answer should be read with;
    `note`: a remark on the answer, said as it is found; `progress`: a bar for work,
    `transfer`: a bar for reading or fetching bytes."""

    info: Callable[[str], None] = _silent
    warning: Callable[[str], None] = _silent
    note: Callable[[str], None] = _silent
    progress: Bar = _no_bar
    transfer: Bar = _no_bar
