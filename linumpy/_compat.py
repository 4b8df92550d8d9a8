"""The one place linumpy reaches into zarr's private modules.

zarr documents ``zarr.core`` as internal. linumpy needs one piece of it that has no public
equivalent in the zarr versions pinned in ``pyproject.toml`` (the type of the spec zarr hands a
codec); it is imported here and nowhere else, so a zarr release that moves it breaks one module,
and ``tests/test_compat.py`` names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["PRIVATE_ZARR_NAMES"]

#: Every private zarr name linumpy uses, as ``module:name`` (checked by the test suite).
PRIVATE_ZARR_NAMES = ("zarr.core.array_spec:ArraySpec",)

if TYPE_CHECKING:  # annotations only: zarr builds the specs, linumpy reads their fields
    from zarr.core.array_spec import ArraySpec  # noqa: F401
