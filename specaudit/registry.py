"""One small registry type, used for checks, mutants, processing hypotheses, adapters and target aliases.

specaudit names many things a user picks by name on the command line or in a scenario: a check
(``--efficiency``, baselines), a mutant (``mutant:NAME``, ``selftest --zoo``), an adapter
(``--adapter hf``), a target alias (``reference-block``). Each used to be a hand-rolled dict with
its own ``get`` and its own "unknown X" message. :class:`Registry` is the one shape for all of them,
after lm-evaluation-harness ``api/registry.py``: ordered by registration, filled by a decorator or a
call, looked up with an error that names the closest registered name
(:func:`specaudit.errors.closest`), and able to hold lazy ``"module:attr"`` entries that are
imported only when first asked for (the built-in adapters, so that listing them needs no torch).
It sits at the bottom of the layers with :mod:`specaudit.errors`: it knows nothing of what it holds.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

from specaudit.errors import closest

__all__ = ["Lazy", "Registry"]

T = TypeVar("T")


class Lazy:
    """A ``"module:attr"`` placeholder, imported the first time its registry hands it out."""

    __slots__ = ("spec",)

    def __init__(self, spec: str):
        self.spec = spec

    def load(self) -> object:
        """Import the module and return the attribute (dotted attributes allowed)."""
        module, _, attr = self.spec.partition(":")
        obj: object = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj

    def __repr__(self) -> str:
        return f"Lazy({self.spec!r})"


class Registry(Generic[T]):
    """Named entries of one kind, in registration order.

    ``what`` names the kind in messages (``unknown mutant 'x' (did you mean 'y'?)``). ``error``
    is the exception class :meth:`get` raises for an unknown name (KeyError by default, a
    UsageError where the name comes from the user). Names are unique: registering one twice is
    a programming error (ValueError) unless ``replace=True``.
    """

    def __init__(self, what: str, error: Callable[[str], Exception] = KeyError):
        self.what = what
        self.error = error
        self._entries: dict[str, T | Lazy] = {}

    # -- filling -------------------------------------------------------------------------------

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, entry: T | Lazy, *, replace: bool = False) -> T | Lazy: ...

    def register(self, name: str, entry: object = None, *, replace: bool = False) -> object:
        """Register ``entry`` under ``name``; without ``entry``, return a decorator that does."""
        if entry is None:

            def wrap(obj: T) -> T:
                self.register(name, obj, replace=replace)
                return obj

            return wrap
        if name in self._entries and not replace:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._entries[name] = entry  # type: ignore[assignment]
        return entry

    def lazy(self, name: str, spec: str) -> None:
        """Register ``"module:attr"`` under ``name``, imported on first :meth:`get`."""
        self.register(name, Lazy(spec))

    # -- reading -------------------------------------------------------------------------------

    def get(self, name: str) -> T:
        """Return the entry ``name``; raise ``self.error`` naming the closest registered name."""
        try:
            entry = self._entries[name]
        except KeyError:
            raise self.error(self.unknown(name)) from None
        if isinstance(entry, Lazy):
            entry = self._entries[name] = entry.load()  # type: ignore[assignment]
        return entry  # type: ignore[return-value]

    def unknown(self, name: str) -> str:
        """Return the message for an unknown ``name``: the closest match and every known name."""
        return f"unknown {self.what} {name!r}{closest(name, self._entries)}; known: {', '.join(self._entries)}"

    def spec(self, name: str) -> str | None:
        """Return the ``"module:attr"`` of a lazy entry (None for a loaded one)."""
        entry = self._entries.get(name)
        return entry.spec if isinstance(entry, Lazy) else None

    def names(self) -> list[str]:
        """Return the registered names in registration order."""
        return list(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        """Yield ``(name, entry)`` in registration order, loading lazy entries."""
        for name in list(self._entries):
            yield name, self.get(name)

    def values(self) -> Iterator[T]:
        """Yield the entries in registration order, loading lazy entries."""
        for _, entry in self.items():
            yield entry

    def select(self, keep: Callable[[T], bool]) -> dict[str, T]:
        """Return ``{name: entry}`` of the entries ``keep`` accepts, in registration order."""
        return {name: entry for name, entry in self.items() if keep(entry)}

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {self.names()!r})"
