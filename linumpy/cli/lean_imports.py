"""A command's ``dask.array`` imported without the optional modules it would load and never use.

``dask.array`` imports xarray (with pandas), ``scipy.sparse``, ``scipy.fftpack`` and
``cupyx.scipy.sparse`` when installed, to recognise their arrays; the ``linum-*`` commands never
hand it such arrays, and these imports are about half of ``import dask.array``'s time. Only a
command's own process hides them (:func:`linumpy.cli.parse_args` with ``argv`` None), and only
while ``dask.array`` itself is imported: they stay importable afterwards.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["SKIPPED_BY_COMMANDS", "lean_dask_array"]

#: The optional imports of ``dask.array`` that a command skips.
SKIPPED_BY_COMMANDS = ("xarray", "scipy.sparse", "scipy.fftpack", "cupyx.scipy.sparse")


class _Hiding(importlib.abc.Loader):
    """Executes a module with ``hidden`` modules unimportable (``None`` in ``sys.modules``);
    again as usual when that raises ImportError."""

    def __init__(self, loader: importlib.abc.Loader, hidden: Sequence[str]) -> None:
        self._loader, self._hidden = loader, hidden

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        _import_cupy()
        hidden = [name for name in self._hidden if name not in sys.modules]
        for name in hidden:
            sys.modules[name] = None  # type: ignore[assignment]  # import then raises ImportError
        try:
            self._loader.exec_module(module)
            return
        except ImportError:
            pass  # a dask that needs one of them: import it the usual way below
        finally:
            for name in hidden:
                if name in sys.modules and sys.modules[name] is None:
                    del sys.modules[name]
        self._loader.exec_module(module)


def _import_cupy() -> None:
    """Import cupy, where it is installed, before anything is hidden: ``dask.array`` imports it
    anyway, and cupy (or a GPU command's warm-up thread importing it meanwhile) must see every
    module it imports."""
    if "cupy" in sys.modules or importlib.util.find_spec("cupy") is not None:
        with contextlib.suppress(ImportError):  # dask.array skips such a cupy too
            import cupy  # noqa: F401


class _LeanFinder(importlib.abc.MetaPathFinder):
    """Finds ``dask.array`` once, with a loader that hides :data:`SKIPPED_BY_COMMANDS`."""

    used = False

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "dask.array" or self.used:
            return None
        self.used = True
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None  # found by another finder, imported as usual
        # Removed only with a spec in hand: the import system stops looking then, so taking
        # this finder out of the list it iterates skips none of the others.
        sys.meta_path.remove(self)
        spec.loader = _Hiding(spec.loader, SKIPPED_BY_COMMANDS)
        return spec


def lean_dask_array() -> None:
    """Import ``dask.array``, when this process first does, without :data:`SKIPPED_BY_COMMANDS`
    (nothing happens when it is already imported or the hook is in place)."""
    if "dask.array" in sys.modules or any(isinstance(f, _LeanFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _LeanFinder())
