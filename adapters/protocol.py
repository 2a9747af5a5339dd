"""How a protocol plugs in: a module of this package or its subpackages that defines `ADAPTER` is served
by the app.

The app factory and the entrance find every adapter here (`registered()`), so a new protocol is a new
module with an `ADAPTER` in it and touches nothing else: its blueprint is registered, its JSON-RPC
endpoint's refusals are answered in its codes, its public paths skip authentication.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from flask import Blueprint, Flask

from tasks_backend.access.auth import Principal
from tasks_backend.push.subscriptions import PushFormat
from tasks_backend.service.runtime import Runtime

from .jsonrpc import Codes


@dataclass(frozen=True)
class Adapter:
    """What one protocol module adds to the app; `name` also names its push subscriptions' format."""

    name: str
    blueprint: Blueprint
    #: JSON-RPC endpoints of the protocol: refusals at the door are JSON-RPC errors in `codes`.
    rpc_paths: frozenset[str] = frozenset()
    codes: Codes = field(default_factory=dict)
    #: Paths anyone may read (probes, descriptions, cards).
    public_paths: frozenset[str] = frozenset()
    #: Paths whose caller is known by a session the adapter checks itself (the web page).
    session_paths: Callable[[str], bool] | None = None
    #: Who a request on those paths is signed in as (None: nobody), asked by the entrance, which then holds
    #: that caller to the limits a bearer token meets; given the app, since the entrance runs outside Flask.
    session_principal: Callable[[Flask, dict[str, Any]], Principal | None] | None = None
    #: Anything else the adapter sets up on the app (hooks, metrics).
    install: Callable[[Flask, Runtime], None] | None = None
    #: How the workers post this protocol's push subscriptions (stored under the adapter's name).
    push_format: PushFormat | None = None


@functools.cache
def registered() -> tuple[Adapter, ...]:
    """Every adapter of this package and its subpackages, by module name (found once per process)."""
    return tuple(_adapters(_package_path(), f"{__package__}."))


def _adapters(path: list[str], prefix: str) -> list[Adapter]:
    found: list[Adapter] = []
    for info in sorted(pkgutil.iter_modules(path), key=lambda i: i.name):
        module = importlib.import_module(f"{prefix}{info.name}")
        adapter = getattr(module, "ADAPTER", None)
        if isinstance(adapter, Adapter):
            found.append(adapter)
        if info.ispkg:
            found.extend(_adapters(list(module.__path__), f"{module.__name__}."))
    return found


def _package_path() -> list[str]:
    package = importlib.import_module(__package__ or "adapters")
    return list(package.__path__)


def push_formats() -> dict[str, PushFormat]:
    """Adapter name -> the format its push subscriptions are posted in (for the workers' delivery loop)."""
    return {a.name: a.push_format for a in registered() if a.push_format is not None}


@functools.cache
def public_paths() -> frozenset[str]:
    return frozenset().union(*(a.public_paths for a in registered()))


@functools.cache
def rpc_codes() -> dict[str, Codes]:
    """JSON-RPC endpoint -> the code table of its protocol."""
    return {path: a.codes for a in registered() for path in sorted(a.rpc_paths)}


@functools.cache
def rpc_protocols() -> dict[str, str]:
    """JSON-RPC endpoint -> the name of its protocol (read on every traced request: built once)."""
    return {path: a.name for a in registered() for path in sorted(a.rpc_paths)}


@functools.cache
def session_paths() -> Callable[[str], bool]:
    """Whether an adapter knows the caller of a path by its own session (not a bearer header); asked on
    every request, so the one adapter that has sessions (the web page) is asked directly."""
    checks = tuple(a.session_paths for a in registered() if a.session_paths is not None)
    if len(checks) == 1:
        return checks[0]
    return lambda path: any(check(path) for check in checks)


def sessions(app: Flask) -> Callable[[dict[str, Any]], Principal | None]:
    """Who a request on a session path is signed in as, by the adapter whose path it is (None: nobody)."""
    owners = tuple((a.session_paths, a.session_principal) for a in registered()
                   if a.session_paths is not None and a.session_principal is not None)

    def principal(environ: dict[str, Any]) -> Principal | None:
        path = environ.get("PATH_INFO", "")
        return next((signed_in(app, environ) for owns, signed_in in owners if owns(path)), None)

    return principal


class PublicPaths(Set[str]):
    """`public_paths()` as a set that is read when first used, not when this module is imported."""

    def __contains__(self, path: object) -> bool:
        return path in public_paths()

    def __iter__(self) -> Iterator[str]:
        return iter(public_paths())

    def __len__(self) -> int:
        return len(public_paths())


class RpcPaths(Mapping[str, str]):
    """JSON-RPC endpoint -> the name of its protocol, read when first used."""

    def _paths(self) -> dict[str, str]:
        return rpc_protocols()

    def __getitem__(self, path: str) -> str:
        return self._paths()[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths())

    def __len__(self) -> int:
        return len(self._paths())
