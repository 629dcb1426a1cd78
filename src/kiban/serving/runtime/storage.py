"""Where the model's files are: resolve ``--model_dir``/``--storage_uri``/``--model_id`` offline.

Nothing is downloaded: ``file://`` and ``pvc://`` map to local paths (kiban
mounts claims under ``$KIBAN_PVC_ROOT``), and ``hf://`` ids are looked up in
the local Hugging Face cache through huggingface_hub's own offline lookup. A revision follows
the id after ``@`` or, as KServe writes it, after ``:``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

from kiban.domain.model_storage import DEFAULT_PVC_ROOT, PVC_ROOT_ENV
from kiban.serving.runtime.errors import LoadError
from kiban.serving.runtime.options import ServerOptions

HF_ID_FORMS = "org/name, org/name@revision or org/name:revision"


def resolve_model_dir(options: ServerOptions) -> Path:
    """The local directory holding the model, from the first of model_dir, storage_uri, model_id."""
    if options.model_dir:
        path = Path(options.model_dir).expanduser()
        return _existing_dir(path, f"--model_dir {options.model_dir}")
    if options.storage_uri:
        return resolve_uri(options.storage_uri)
    if options.model_id:
        return resolve_hf_id(options.model_id, source=f"--model_id {options.model_id}")
    raise LoadError("no model given: pass --model_dir, --storage_uri or --model_id")


def resolve_uri(uri: str) -> Path:
    """``file:///abs``, ``pvc://claim/sub/path``, ``hf://org/name[@rev|:rev]`` or a local path."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise LoadError(f"storage_uri {uri}: file URIs must be absolute (file:///path)")
        return _existing_dir(Path(unquote(parsed.path)), f"storage_uri {uri}")
    if scheme == "pvc":
        claim = parsed.netloc
        if not claim:
            raise LoadError(f"storage_uri {uri}: no claim name (expected pvc://CLAIM/sub/path)")
        root = pvc_root(os.environ)
        sub = unquote(parsed.path).lstrip("/")
        path = root / claim / sub if sub else root / claim
        if ".." in Path(sub).parts:
            raise LoadError(f"storage_uri {uri}: the path may not leave the claim (..)")
        return _existing_dir(path, f"storage_uri {uri} (claim {claim} mounted at {root / claim})")
    if scheme == "hf":
        return resolve_hf_id(parsed.netloc + parsed.path, source=f"storage_uri {uri}")
    if scheme == "":
        return _existing_dir(Path(uri).expanduser(), f"storage_uri {uri}")
    raise LoadError(
        f"storage_uri {uri}: scheme {scheme}:// is not supported offline "
        "(use file://, pvc:// or hf:// from the local cache)"
    )


def pvc_root(environ: Mapping[str, str]) -> Path:
    """Where claims are found: ``$KIBAN_PVC_ROOT``, else /mnt/pvc (where kiban mounts them in
    containers; a local process reads whatever directory is there)."""
    return Path(environ.get(PVC_ROOT_ENV) or DEFAULT_PVC_ROOT)


def hf_cache_dir() -> Path | None:
    """The hub cache in force now: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else the default."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return None


def resolve_hf_id(model_id: str, *, source: str) -> Path:
    """The snapshot directory of ``org/name``, ``org/name@revision`` or ``org/name:revision``
    (KServe's spelling) in the local Hugging Face cache."""
    repo_id, revision = split_hf_id(model_id)
    if repo_id.count("/") > 1 or not repo_id:
        raise LoadError(f"{source}: expected a Hugging Face id {HF_ID_FORMS}")
    from huggingface_hub import snapshot_download

    cache = hf_cache_dir()
    try:
        path = snapshot_download(
            repo_id,
            revision=revision or None,
            cache_dir=str(cache) if cache else None,
            local_files_only=True,
        )
    except Exception as exc:  # huggingface_hub raises several kinds; all mean "not cached"
        where = cache or "the default Hugging Face cache"
        rev = f" at revision {revision}" if revision else ""
        raise LoadError(
            f"{source}: {repo_id}{rev} is not in the local Hugging Face cache ({where}) and "
            f"downloads are disabled ({type(exc).__name__}: {exc})"
        ) from exc
    return Path(path)


def split_hf_id(model_id: str) -> tuple[str, str]:
    """``(repo_id, revision)``; a repo id has neither ``@`` nor ``:``, so the first of either
    starts the revision ("" when none is given)."""
    match = re.match(r"([^@:]*)(?:[@:](.*))?$", model_id.strip("/"), re.DOTALL)
    assert match is not None  # the pattern matches any string
    return match.group(1), match.group(2) or ""


def _existing_dir(path: Path, source: str) -> Path:
    if not path.exists():
        raise LoadError(f"{source}: {path} does not exist")
    if not path.is_dir():
        raise LoadError(f"{source}: {path} is not a directory")
    return path
