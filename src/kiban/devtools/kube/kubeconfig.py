"""The admin kubeconfig of the local control plane: self-contained (certificates embedded)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from kiban.devtools.kube.certs import ControlPlaneCerts

CONTEXT = "kiban-dev"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def kubeconfig(server: str, certs: ControlPlaneCerts) -> dict[str, Any]:
    """A kubeconfig document for the admin user (group system:masters) of the API at server."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": _b64(certs.ca_cert),
                },
            }
        ],
        "users": [
            {
                "name": f"{CONTEXT}-admin",
                "user": {
                    "client-certificate-data": _b64(certs.admin_cert),
                    "client-key-data": _b64(certs.admin_key),
                },
            }
        ],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": f"{CONTEXT}-admin"},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str, certs: ControlPlaneCerts) -> Path:
    """Write the admin kubeconfig (owner-readable only: it holds the admin's private key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.touch(mode=0o600)
    tmp.chmod(0o600)
    tmp.write_text(yaml.safe_dump(kubeconfig(server, certs), sort_keys=False))
    tmp.replace(path)
    return path
