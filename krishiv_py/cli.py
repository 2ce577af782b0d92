"""The ``krishiv`` command: ``krishiv demo`` runs the embedded end-to-end demo."""

from __future__ import annotations

import argparse
import sys

from krishiv_py.errors import KrishivError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="krishiv", description="krishiv_py command line")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the embedded streaming demo on local Spark")
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "version":
        from krishiv_py import __version__

        print(__version__)
        return 0
    from krishiv_py.demo import run_demo

    try:
        return run_demo()
    except KrishivError as exc:
        print(f"krishiv: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the job was stopped and said so in one line
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
