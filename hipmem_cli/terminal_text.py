"""The rules of text on a terminal, as pure functions: what is escaped (`clean`) and where a
line may break (`words_of`, `wrap`; a number and its unit are one word, `whole` keeps a
text on one line). `output/` prints through them."""

from __future__ import annotations

import re
import textwrap
import unicodedata

# Format characters that reorder or hide text on a terminal (bidi overrides and isolates).
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F)}


def clean(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every non-printable character written as an escape (`\\x1b`, `\\u202e`).

    Tabs become one space. Newlines are kept only where the caller composed several lines.
    """
    out = []
    for ch in text:
        if ch == "\n" and keep_newlines:
            out.append(ch)
        elif ch == "\t":
            out.append(" ")
        elif ch == GLUE:  # set by whole(): shown as a space that does not break
            out.append(ch)
        elif ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs", "Co", "Cn"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


# A number and its unit are one word: "8.5 ms", "4.5 MiB", "9,219,648 bytes", "1.00 GiB".
_UNIT_GAP = re.compile(r"(?<=\d) (?=(?:B|KiB|MiB|GiB|TiB|PiB|EiB|bytes|ns|µs|ms|s|%)(?![\w]))")
GLUE = "\ue000"  # a private-use character: joins a number to its unit while wrapping


def glue_units(text: str) -> str:
    return _UNIT_GAP.sub(GLUE, text)


def whole(text: str) -> str:
    """`text` kept on one line wherever it is printed (its spaces do not break)."""
    return text.replace(" ", GLUE)


def words_of(text: str) -> list[str]:
    """The pieces a line may be broken between (a number and its unit count as one)."""
    return [word.replace(GLUE, " ") for word in glue_units(text).split()]


def wrap(text: str, width: int) -> list[str]:
    """Lines of at most `width` columns, broken only between words; a word longer than the
    width gets a line of its own, whole."""
    lines: list[str] = []
    for paragraph in glue_units(text).split("\n"):
        wrapped = textwrap.wrap(
            paragraph,
            width=max(width, 1),
            break_long_words=False,
            break_on_hyphens=False,
            replace_whitespace=False,
            drop_whitespace=True,
        )
        lines.extend(wrapped or [""])
    return [line.replace(GLUE, " ") for line in lines]


_CONTINUATION = " \\"  # a shell line continuation: the command still runs when pasted


def command_lines(command: str, width: int, indent: str) -> list[str]:
    """An example command on lines of `width`, a shell continuation ending each but the last
    (the command as written may hold continuations of its own: they are re-made here): pasted
    into a shell, the lines run as the one command. Help pages and `output.command` use it."""
    words = [word for word in command.split() if word != "\\"]
    pieces = wrapped_words(
        _options_with_values(words), width - len(_CONTINUATION), indent, indent + "    "
    )
    return [piece + _CONTINUATION for piece in pieces[:-1]] + pieces[-1:]


_KEEP = "\ue000"  # a private-use character: a space that does not break (option and value)


def _options_with_values(words: list[str]) -> list[str]:
    """`-r pool` as one word: an option and the value after it are pasted and read together."""
    joined: list[str] = []
    for word in words:
        after_option = joined and joined[-1].startswith("-") and _KEEP not in joined[-1]
        if after_option and not word.startswith("-"):
            joined[-1] += _KEEP + word
            continue
        joined.append(word)
    return joined


def wrapped_words(words: list[str], width: int, initial: str, subsequent: str) -> list[str]:
    """Words on lines of `width`, broken only between them (never at a hyphen, never inside a
    word: a word longer than the line gets a line of its own, whole)."""
    wrapper = textwrap.TextWrapper(width, initial_indent=initial, subsequent_indent=subsequent,
                                   break_on_hyphens=False, break_long_words=False)  # fmt: skip
    return [piece.replace(_KEEP, " ") for piece in wrapper.wrap(" ".join(words))]
