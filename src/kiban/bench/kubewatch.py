"""``python -m kiban.bench.kubewatch KUBECONFIG SELECTOR TARGET TIMEOUT``: the pod watch of
``kiban bench kube`` in a process of its own. It prints ``ready`` once it watches, then one
JSON line: what it saw (see :class:`~kiban.bench.kubeload.WatchResult`) or ``{"error": ...}``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kiban.bench.kubeload import core_api, watch_until_running


def main(argv: list[str]) -> int:
    kubeconfig, selector, target, timeout = argv
    try:
        with core_api(Path(kubeconfig), pool=2) as api:
            result = watch_until_running(api, selector, int(target), float(timeout))
        print(result.to_json(), flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
