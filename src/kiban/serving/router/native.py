"""The router's per-request modules compiled to C by mypyc, when a build of these sources exists.

Why: at 50 concurrent clients the router is bound by its own CPU time per request, and about
half of that is the interpreter running this package; compiled, the same modules cost a
quarter less CPU per request (``kiban bench router`` reports which ran). What is compiled is
these Python sources, unchanged: a build is keyed by a hash of them and of the Python ABI,
and kept outside the repository (``$KIBAN_CACHE_DIR/router-native/<key>/``), so a source
edited since is never shadowed by a stale build; until it is built again the router runs as
plain Python. ``make setup`` builds (``python -m kiban.devtools.router_native``);
``KIBAN_ROUTER_NATIVE=0`` runs plain Python even when a build exists.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import MutableSequence
from dataclasses import dataclass
from pathlib import Path

COMPILED_MODULES = (
    "balancer",
    "dispatcher",
    "exchange",
    "messages",
    "plans",
    "proxy",
    "table",
    "traffic",
    "upstream",
)
"""Modules of this package on the path of every request (not the server's thread and setup)."""
PACKAGE = __name__.rpartition(".")[0]
"""``kiban.serving.router``."""
GROUP = "kiban_router"
"""mypyc's name for the shared library of the compiled modules (``kiban_router__mypyc``)."""
SWITCH = "KIBAN_ROUTER_NATIVE"
KEPT_BUILDS = 4
"""Builds of other sources kept besides the newest (other checkouts may use them)."""
ROUTER_DIR = Path(__file__).resolve().parent
_EXT_SUFFIX = str(sysconfig.get_config_var("EXT_SUFFIX"))


@dataclass(frozen=True)
class NativeState:
    """Whether this process's router runs compiled, and why not when it does not."""

    compiled: bool
    detail: str
    activated: bool = False
    """Whether ``activate`` ran (the state is then final for this process)."""


state = NativeState(False, "not activated")
"""Set once, by the entry point's ``activate``."""


def source_key(router_dir: Path = ROUTER_DIR) -> str:
    """A build's key: the compiled modules' sources and the interpreter's ABI."""
    digest = hashlib.sha256()
    digest.update(f"{sys.implementation.cache_tag}{_EXT_SUFFIX}".encode())
    for name in COMPILED_MODULES:
        source = (router_dir / f"{name}.py").read_bytes()
        digest.update(b"\0%s\0%d\0" % (name.encode(), len(source)))
        digest.update(source)
    return digest.hexdigest()[:24]


def cache_root() -> Path:
    """Where builds are kept, beside the other heavy builds (see scripts/ensure-kube.sh)."""
    base = os.environ.get("KIBAN_CACHE_DIR") or str(Path.home() / ".cache" / "kiban")
    return Path(base) / "router-native"


def _shared_library(build: Path) -> Path:
    return build / f"{GROUP}__mypyc{_EXT_SUFFIX}"


def activate(
    package_path: MutableSequence[str] | None = None, router_dir: Path = ROUTER_DIR
) -> NativeState:
    """Put the build of these sources first on the router package's path, if there is one.

    Called by a process's entry point (``kiban up``, ``kiban bench router`` and its helpers,
    the test run's root ``conftest.py``) before any module of the router is imported: importing
    the package changes nothing. Once one of the compiled modules was imported as plain Python
    the path is left alone (the two are never mixed), and so is a path already activated. A
    build that cannot be loaded leaves the path alone too: the router then runs as plain Python.
    """
    global state
    if state.activated:
        return state
    package = sys.modules[PACKAGE]
    path = package.__path__ if package_path is None else package_path
    loaded = sorted(set(COMPILED_MODULES) & {m.rpartition(".")[2] for m in _router_modules()})
    if loaded:
        state = NativeState(
            False,
            f"plain Python (imported before activate(): {', '.join(loaded)})",
            activated=True,
        )
        return state
    found = use_build(path, router_dir)
    state = NativeState(found.compiled, found.detail, activated=True)
    return state


def _router_modules() -> list[str]:
    """The router's modules this process has imported."""
    return [name for name in list(sys.modules) if name.startswith(PACKAGE + ".")]


def use_build(package_path: MutableSequence[str], router_dir: Path = ROUTER_DIR) -> NativeState:
    """What ``activate`` does, but without recording it as this process's state."""
    if os.environ.get(SWITCH, "1") == "0":
        return NativeState(False, f"plain Python ({SWITCH}=0)")
    try:
        key = source_key(router_dir)
    except OSError as exc:  # sources not shipped as files: nothing to match a build to
        return NativeState(False, f"plain Python (sources unreadable: {exc})")
    build = cache_root() / key
    modules = build / "kiban" / "serving" / "router"
    shared = _shared_library(build)
    if not modules.is_dir() or not shared.is_file():
        return NativeState(False, f"plain Python (no build of these sources, key {key})")
    name = shared.name.removesuffix(_EXT_SUFFIX)
    if name not in sys.modules:
        try:
            spec = importlib.util.spec_from_file_location(name, shared)
            if spec is None or spec.loader is None:
                raise ImportError(f"no loader for {shared}")
            library = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(library)
        except (ImportError, OSError) as exc:
            return NativeState(False, f"plain Python (build {key} did not load: {exc})")
        sys.modules[name] = library
    package_path.insert(0, str(modules))
    return NativeState(True, f"compiled by mypyc (build {key})")


def running_compiled() -> bool:
    """Whether the router's request path was in fact loaded from the compiled build."""
    module = sys.modules.get("kiban.serving.router.exchange")
    return module is not None and str(getattr(module, "__file__", "")).endswith(_EXT_SUFFIX)


class NativeBuildError(Exception):
    """The compiled router could not be built (the router still runs, as plain Python)."""


_COMPILE = """
import sys
from mypyc.build import mypycify
from setuptools import setup
out, group, files = sys.argv[1], sys.argv[2], sys.argv[3:]
setup(
    name="kiban-router-native",
    ext_modules=mypycify(files, opt_level="3", group_name=group, target_dir=out + "/c"),
    script_args=["-q", "build_ext", "--build-lib", out + "/lib", "--build-temp", out + "/tmp"],
)
"""
"""Run in a child interpreter: setuptools exits and keeps global state, so not in this one."""


def build(router_dir: Path = ROUTER_DIR, *, timeout_s: float = 900.0) -> Path:
    """Compile the modules (or find them compiled) and return the build's folder."""
    key = source_key(router_dir)
    root = cache_root()
    target = root / key
    if _shared_library(target).is_file():
        return target
    try:
        import mypyc  # noqa: F401  (only to say clearly what is missing)
    except ImportError as exc:
        raise NativeBuildError("mypyc is not installed (it comes with mypy)") from exc
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        files = [str(router_dir / f"{name}.py") for name in COMPILED_MODULES]
        env = dict(os.environ, MYPY_CACHE_DIR=str(staging / "mypy-cache"))
        try:
            done = subprocess.run(
                [sys.executable, "-c", _COMPILE, str(staging), GROUP, *files],
                cwd=router_dir.parents[2],  # the folder that holds the kiban package
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as exc:
            raise NativeBuildError(f"mypyc took longer than {timeout_s:g} s") from exc
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip()[-3000:]
            raise NativeBuildError(f"mypyc failed (exit {done.returncode}):\n{output}")
        try:
            (staging / "lib").rename(target)
        except OSError:
            if not _shared_library(target).is_file():  # not another build finishing first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _prune(root, keep=target)
    return target


def _prune(root: Path, *, keep: Path) -> None:
    """Remove all but the newest builds (a build is a few megabytes; keys change per edit)."""
    builds = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    builds.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [p for p in builds if p != keep][KEPT_BUILDS:]:
        shutil.rmtree(old, ignore_errors=True)
