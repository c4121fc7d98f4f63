"""Entry point: builds the typer app from one module per command group and runs it inside
one error boundary, so library errors become `Error: ...` on stderr with their exit code."""

from __future__ import annotations

import sys

import typer

from hipmem.errors import HipmemError
from hipmem_cli import output

app = typer.Typer(
    name="hipmem",
    help="Size rocBLAS/rocSOLVER workspaces, recommend settings, replay allocation logs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(wanted: bool) -> None:
    if wanted:
        import hipmem

        output.stdout.print(f"hipmem {hipmem.__version__}", highlight=False, markup=False)
        raise typer.Exit()


@app.callback()
def _global_options(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    output.state.debug = debug


# Library parameters whose flag is not simply `--` + the name with dashes.
_FLAGS = {"spec": "--resource", "compute_units": "--cus", "align_bytes": "--align"}


def cli_message(err: HipmemError) -> str:
    """The error's line as the command line says it: flags, not Python parameter names."""
    if err.parameter is None:
        return str(err)
    return err.for_flag(_FLAGS.get(err.parameter, "--" + err.parameter.replace("_", "-")))


def main() -> None:
    """Console-script entry point."""
    from hipmem_cli import commands

    commands.register(app, sys.argv[1:])
    try:
        # Standalone mode: typer handles --help and usage errors itself (exit code 2).
        app(prog_name="hipmem")
    except HipmemError as err:
        if output.state.debug:
            raise
        output.error(cli_message(err))
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        output.error("interrupted")
        sys.exit(130)
    except Exception as err:  # the boundary: even a bug is reported as one line
        if output.state.debug:
            raise
        output.error(f"internal error: {type(err).__name__}: {err} (--debug shows the traceback)")
        sys.exit(1)


if __name__ == "__main__":
    main()
