"""``python -m kiban.devtools.router_native``: compile the router's request path for the sources
as they are (a no-op when that build exists); ``make setup`` runs it. See
``kiban.serving.router.native`` for why and how a build is found."""

from __future__ import annotations

import sys

from kiban.serving.router.native import NativeBuildError, build


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        print("usage: python -m kiban.devtools.router_native", file=sys.stderr)
        return 2
    try:
        target = build()
    except (NativeBuildError, OSError) as exc:
        print(f"the router was not compiled, it runs as plain Python: {exc}", file=sys.stderr)
        return 1
    print(f"the router's request path is compiled by mypyc: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
