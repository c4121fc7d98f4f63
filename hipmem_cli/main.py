"""Entry point: builds the typer app from one module per command group and runs it inside
one error boundary, so that every failure is one line on stderr with its exit code.

Exit codes, the same in every command (also in each command's --help and docs/exit-codes.md):
0 done; 1 the work failed or found a problem (a call the library rejected, a replay with
refused allocations, a check that does not pass, a missing GPU or library); 2 the command
line or an input file is wrong (usage); 130 interrupted (Ctrl-C).

Only the standard library and the output module (which loads rich only when it draws) are
imported at module level: a Ctrl-C while typer, rich and the libraries load must still end as
the one "interrupted" line, so the module that prints it is in place before the handler is.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from hipmem._core.freed_memory import use_system_pool

from . import output

# Accepted anywhere on the command line (before a `--`), not only before the subcommand.
GLOBAL_FLAGS = ("--debug", "--version")

EXIT_CODES_HELP = (
    "Exit codes: 0 done; 1 the work failed or found a problem; 2 usage (a bad option, "
    "argument or input file); 130 interrupted (143: SIGTERM)."
)


def version_text() -> str:
    import hipmem

    return f"hipmem {hipmem.__version__}"


def split_global_flags(argv: list[str]) -> tuple[set[str], list[str]]:
    """The global flags found anywhere in `argv`, and the words left for the subcommand."""
    found: set[str] = set()
    rest: list[str] = []
    for index, word in enumerate(argv):
        if word == "--":
            rest.extend(argv[index:])
            break
        if word in GLOBAL_FLAGS:
            found.add(word)
        else:
            rest.append(word)
    return found, rest


def build_app(argv: list[str]) -> Any:
    import typer

    from . import commands
    from .help_format import plain_argument_names

    plain_argument_names()
    # A long first-use build (the virtual GPU of a PyTorch release, RMM's resources) is said
    # in one line before it starts: minutes with nothing printed read as a hang.
    from hipmem._core.build_cache import announce_builds

    announce_builds(output.info)

    app = typer.Typer(
        name="hipmem",
        help="Size rocBLAS/rocSOLVER workspaces, recommend settings, replay allocation logs.",
        epilog=f"{EXIT_CODES_HELP}\n\nDocs: hipmem docs index",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        rich_markup_mode=None,  # plain help: flags as flags, nothing cut or read as markup
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def _global_options(
        debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
        version: bool = typer.Option(False, "--version", help="Print hipmem's version."),
    ) -> None:
        """Size rocBLAS/rocSOLVER workspaces, recommend settings, replay allocation logs.

        --debug, --version and -h/--help are accepted anywhere on the command line.
        """

    commands.register(app, argv)
    return app


def main() -> None:
    """Console-script entry point."""
    use_system_pool()  # before pyarrow is imported: hipmem/_core/freed_memory.py says why
    for stopping in output.STOPPING_SIGNALS:
        signal.signal(stopping, _on_stop)
    try:
        code = _run(sys.argv[1:])
    except KeyboardInterrupt:
        code = 130
    except Exception:
        # Where Python wraps what a call raises, a Ctrl-C arrives as another error: a dataclass
        # made while a module is imported turns it into a RuntimeError (`__set_name__`).
        if not _interrupted:
            raise
        code = 130
    if _interrupted:
        output.interrupted(_interrupted)
    sys.exit(code)


_interrupted = 0  # the signal that stops the command, once one came


def _on_stop(signum: int, frame: object) -> None:
    """First Ctrl-C or SIGTERM: unwind as a Ctrl-C does (finally blocks remove temporary
    files, a fleet's cluster and its workers are closed), then the one line. Another one
    while unwinding: the line at once."""
    global _interrupted
    if _interrupted:
        output.interrupted(_interrupted)
    _interrupted = signum
    raise KeyboardInterrupt


def _run(argv: list[str]) -> int:
    flags, argv = split_global_flags(argv)
    output.state.debug = "--debug" in flags
    try:
        if "--version" in flags:
            output.line(version_text())
            return 0
        if "--debug" not in flags:
            kept = _answer_again(argv)
            if kept is not None:
                return kept
    except OSError as err:  # a kept answer written to a full disk: the boundary says it
        return _report(err)
    return _answer(argv)


def _answer_again(argv: list[str]) -> int | None:
    """A repeated size/recommend/check answered from the cache of answers
    (hipmem._core.answer_cache), before typer, rich or a library is imported; None: a miss,
    which `_answer` answers and keeps."""
    from hipmem._core import answer_cache

    if argv[:1] == [] or argv[0] not in answer_cache.COMMANDS or not answer_cache.piped():
        return None
    from hipmem._core.cache_root import CacheUnusable, cache_dir

    try:
        root = cache_dir()
    except CacheUnusable:
        return None  # the command itself says what is wrong with the cache, in one line
    changeable = answer_cache.changeable_state(argv, root)
    key = answer_cache.key_for(argv, root, changeable=changeable)
    if key is None or changeable is None:
        return None
    try:
        kept = answer_cache.lookup(root, key, changeable)
    except answer_cache.DamagedAnswer as damaged:
        # Said before the answer's streams are kept: the answer kept again is without it.
        output.warning(str(damaged))
        answer_cache.drop(damaged.path)
        kept = None
    if kept is not None:
        output.replay_answer(kept[0], kept[1])
        return kept[2]
    streams = sys.stdout, sys.stderr
    out, err = answer_cache.Tee(sys.stdout), answer_cache.Tee(sys.stderr)
    sys.stdout, sys.stderr = out, err
    try:
        code = _answer(argv)
    finally:
        sys.stdout, sys.stderr = streams
    # Kept only when nothing it depends on changed while it ran (a fetch, a build, a named
    # file it wrote): the rest of the key (hipmem's files, the environment) a command never
    # changes, so it is not computed again.
    kept_whole = not (out.failed or err.failed)  # not an answer to a full disk
    if (code in answer_cache.KEPT_CODES and kept_whole
            and answer_cache.changeable_state(argv, root) == changeable):  # fmt: skip
        answer_cache.store(root, key, changeable, out.text(), err.text(), code)
    return code


def _answer(argv: list[str]) -> int:
    app = build_app(argv)
    try:
        result = app(args=argv, prog_name="hipmem", standalone_mode=False)
    except KeyboardInterrupt:
        raise
    except Exception as err:  # the boundary: even a bug is reported as one line
        if _interrupted:  # a Ctrl-C wrapped on its way (main says where): not a bug
            raise
        return _report(err)
    return result if isinstance(result, int) else 0


def _report(err: Exception) -> int:
    from .error_boundary import report

    return report(err)


if __name__ == "__main__":
    main()
