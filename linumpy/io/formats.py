"""The OME-NGFF versions linumpy reads and writes, one object each (:func:`format_of`): each
carries what its version decides, so other modules never compare version strings themselves
(``tests/test_import_rules.py`` checks it). NGFF 0.1 to 0.3 are read, never written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal, overload

import numcodecs
import zarr

from linumpy import settings
from linumpy.errors import LinumpyError

__all__: list[str] = []

#: The versions linumpy writes.
NgffVersion = Literal["0.4", "0.5"]

#: Group attributes that NGFF 0.5 keeps under ``ome`` and NGFF 0.4 at the top.
OME_KEYS = (
    "multiscales",
    "omero",
    "labels",
    "image-label",
    "plate",
    "well",
    "bioformats2raw.layout",
)

#: OME keys whose value states its own NGFF version in 0.4 (``image-label``, ``plate``, ``well``).
_VERSIONED_KEYS = ("image-label", "plate", "well")


class ChecksummedZstd(numcodecs.Zstd):
    """numcodecs' zstd whose frames carry their content checksum while ``.zarray`` names only ``id``
    and ``level`` (tensorstore, ngff-zarr and zarr 2.18 with numcodecs 0.12 refuse a ``checksum``
    key); registered under ``zstd``, so that arrays opened again keep writing checksummed frames."""

    codec_id = "zstd"

    def __init__(self, level: int = 3, checksum: bool | None = None) -> None:
        on = settings.get().write_checksum if checksum is None else bool(checksum)
        super().__init__(level=level, checksum=on)

    def get_config(self) -> dict[str, Any]:
        # zarr-python leaves a "checksum" key out of .zarray when it is not true
        return {"id": "zstd", "level": self.level, "checksum": None}


numcodecs.register_codec(ChecksummedZstd)


class Ngff04:
    """NGFF 0.4: zarr v2; the OME keys at the top of ``.zattrs``, each multiscale (and
    ``image-label``, ``plate``, ``well``) stating its version; one file per chunk, no shards."""

    version: str = "0.4"
    zarr_format: int = 2
    #: The file holding a group's attributes.
    attributes_file: str = ".zattrs"
    #: The attribute the OME keys live under; None: at the top of the attributes.
    ome_key: str | None = None
    sharding: bool = False
    #: Whether its arrays' metadata list codecs (zarr v3) rather than a compressor and filters.
    codec_pipeline: bool = False
    #: Whether linumpy writes it (and validates it with ome-zarr-models).
    writable: bool = True
    #: Whether the GPU encodes its arrays (the write engine writes zarr v3 arrays only).
    gpu_encoding: bool = False

    def __str__(self) -> str:
        return self.version

    def __repr__(self) -> str:
        return f"<NGFF {self.version}>"

    # -- arrays -------------------------------------------------------------------------------

    def compressors(self, zstd_level: int, checksum: bool) -> Any:
        """The compressor linumpy writes: zstd at ``zstd_level``, its frames carrying their
        content checksum with ``checksum`` while ``.zarray`` names only ``id`` and ``level``."""
        return ChecksummedZstd(zstd_level, checksum=checksum)

    def array_options(
        self, zstd_level: int, checksum: bool, dimension_names: list[str] | None = None
    ) -> dict[str, Any]:
        """The keywords of ``zarr.create_array`` that this version decides: compressors, chunk
        key encoding (``/`` between the chunk numbers) and, where it has them, dimension names."""
        return {
            "compressors": self.compressors(zstd_level, checksum),
            "chunk_key_encoding": {"name": "v2", "separator": "/"},
        }

    # -- attributes ---------------------------------------------------------------------------

    def image_attrs(self, multiscale: Mapping[str, Any]) -> dict[str, Any]:
        """An image group's attributes holding ``multiscale`` as this version states it."""
        return {"multiscales": [{**multiscale, "version": self.version}]}

    def with_ome(self, attrs: Mapping[str, Any], key: str, value: Any) -> dict[str, Any]:
        """``attrs`` with the OME key ``key`` set to ``value`` where this version keeps it."""
        return {**attrs, key: value}

    def convert_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """A group's attributes of any NGFF version as this version keeps them (the OME keys
        moved, their versions restated); the other keys as they are."""
        rest = dict(attrs)
        ome = dict(rest.pop("ome", {}))
        ome.pop("version", None)
        for key in OME_KEYS:
            if key in rest:
                ome[key] = rest.pop(key)
        if not ome:
            return rest
        for key in _VERSIONED_KEYS:
            value = ome.get(key)
            if isinstance(value, Mapping) and "version" in value:
                ome[key] = self._restate(dict(value))
        if "multiscales" in ome:
            ome["multiscales"] = [
                {k: v for k, v in entry.items() if k != "version"}
                if isinstance(entry, Mapping)
                else entry
                for entry in ome["multiscales"]
            ]
        return self._gather(ome, rest)

    def _restate(self, value: dict[str, Any]) -> dict[str, Any]:
        """A versioned OME value (``image-label``, ``plate``, ``well``) stating this version."""
        value["version"] = self.version
        return value

    def _gather(self, ome: dict[str, Any], rest: dict[str, Any]) -> dict[str, Any]:
        """The OME keys and the other attributes, as this version keeps them."""
        if "multiscales" in ome:
            ome["multiscales"] = [
                {"version": self.version, **entry} if isinstance(entry, Mapping) else entry
                for entry in ome["multiscales"]
            ]
        return {**ome, **rest}

    # -- validation ---------------------------------------------------------------------------

    def validated_part(self, attrs: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The part of an image group's attributes that this version's models validate, None
        when the attributes declare another version (left to linumpy's own parser)."""
        multiscales = attrs.get("multiscales")
        first = multiscales[0] if isinstance(multiscales, list) and multiscales else {}
        if not isinstance(first, Mapping) or first.get("version", self.version) == self.version:
            return attrs
        return None

    def image_model(self) -> Any:
        """ome-zarr-models' class for this version's image attributes (imported here: pydantic
        would slow every import of linumpy)."""
        from ome_zarr_models.v04.image import ImageAttrs

        return ImageAttrs


class Ngff05(Ngff04):
    """NGFF 0.5: zarr v3; the OME keys under ``ome`` in ``zarr.json`` with one version for all;
    arrays sharded, zstd and a crc32c of each chunk, dimension names stated."""

    version = "0.5"
    zarr_format = 3
    attributes_file = "zarr.json"
    ome_key = "ome"
    sharding = True
    codec_pipeline = True
    gpu_encoding = True

    def compressors(self, zstd_level: int, checksum: bool) -> Any:
        """zstd and, with ``checksum``, its content checksum and a crc32c of each compressed chunk:
        readers reject a damaged frame before any decoder sees it (nvCOMP may crash on one)."""
        if not checksum:
            return [zarr.codecs.ZstdCodec(level=zstd_level, checksum=False)]
        return [zarr.codecs.ZstdCodec(level=zstd_level, checksum=True), zarr.codecs.Crc32cCodec()]

    def array_options(
        self, zstd_level: int, checksum: bool, dimension_names: list[str] | None = None
    ) -> dict[str, Any]:
        options = super().array_options(zstd_level, checksum, dimension_names)
        options["chunk_key_encoding"] = {"name": "default", "separator": "/"}
        if dimension_names:
            options["dimension_names"] = dimension_names
        return options

    def image_attrs(self, multiscale: Mapping[str, Any]) -> dict[str, Any]:
        return {self.ome_key: {"version": self.version, "multiscales": [dict(multiscale)]}}

    def with_ome(self, attrs: Mapping[str, Any], key: str, value: Any) -> dict[str, Any]:
        return {**attrs, self.ome_key: {**attrs.get(self.ome_key, {}), key: value}}

    def _restate(self, value: dict[str, Any]) -> dict[str, Any]:
        del value["version"]  # the ``ome`` version states it
        return value

    def _gather(self, ome: dict[str, Any], rest: dict[str, Any]) -> dict[str, Any]:
        return {**rest, self.ome_key: {"version": self.version, **ome}}

    def validated_part(self, attrs: Mapping[str, Any]) -> Mapping[str, Any] | None:
        ome = attrs.get(self.ome_key)
        if isinstance(ome, Mapping) and ome.get("version") == self.version:
            return ome
        return None

    def image_model(self) -> Any:
        from ome_zarr_models.v05.image import ImageAttrs

        return ImageAttrs


class NgffLegacy(Ngff04):
    """NGFF 0.1 to 0.3 (zarr v2, the OME keys at the top): read from the attributes, never
    validated (ome-zarr-models has no model of them) nor written."""

    writable = False

    def __init__(self, version: str) -> None:
        self.version = version

    def validated_part(self, attrs: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return None


NgffFormat = Ngff04  # every format object is one (Ngff05 and NgffLegacy derive from it)

#: NGFF 0.4 (zarr v2).
NGFF_04 = Ngff04()
#: NGFF 0.5 (zarr v3), what linumpy writes by default.
NGFF_05 = Ngff05()
_WRITABLE = {fmt.version: fmt for fmt in (NGFF_04, NGFF_05)}
_LEGACY = {version: NgffLegacy(version) for version in ("0.1", "0.2", "0.3")}
_BY_ZARR_FORMAT = {fmt.zarr_format: fmt for fmt in (NGFF_04, NGFF_05)}
_READS = "linumpy reads NGFF 0.4 and 0.5"


def for_zarr_format(zarr_format: int) -> NgffFormat:
    """The NGFF version linumpy writes in zarr format ``zarr_format`` (2: 0.4, 3: 0.5)."""
    try:
        return _BY_ZARR_FORMAT[int(zarr_format)]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"zarr format {zarr_format!r}: linumpy knows zarr v2 and v3") from None


def declared_version(attrs: Mapping[str, Any]) -> str | None:
    """The NGFF version a group's attributes declare (None: no OME metadata). Attributes under
    ``ome`` are 0.5 when they state no version (ome-zarr-py writes a labels group so); OME keys
    at the top (a labels group of NGFF 0.4 has only ``labels``) are 0.4 unless they state one."""
    if "ome" in attrs:
        return str(attrs["ome"].get("version", NGFF_05.version))
    multiscales = attrs.get("multiscales")
    if multiscales:
        return str(multiscales[0].get("version", NGFF_04.version))
    for key in OME_KEYS:
        if isinstance(attrs.get(key), Mapping):
            return str(attrs[key].get("version", NGFF_04.version))
        if key in attrs:
            return NGFF_04.version
    return None


@overload
def format_of(
    value: str | NgffFormat, *, source: str | os.PathLike[str] | None = None
) -> NgffFormat: ...
@overload
def format_of(
    value: Mapping[str, Any], *, source: str | os.PathLike[str] | None = None
) -> NgffFormat | None: ...
def format_of(
    value: str | NgffFormat | Mapping[str, Any], *, source: str | os.PathLike[str] | None = None
) -> NgffFormat | None:
    """The format object of an NGFF version, or of the version a group's attributes declare."""
    if isinstance(value, Ngff04):
        return value
    if isinstance(value, Mapping):
        declared = declared_version(value)
        if declared is None:
            return None
        value = declared
    found = _WRITABLE.get(value) or _LEGACY.get(value)
    if found is not None:
        return found
    if source is not None:
        raise LinumpyError(f"{source}: an NGFF {value} image; {_READS}")
    raise ValueError(f"NGFF {value!r} is not a version linumpy knows; {_READS}")


def writable_format(value: str | NgffFormat) -> NgffFormat:
    """The format object of a version linumpy writes (a writer's ``ngff_version``)."""
    if isinstance(value, Ngff04) and value.writable:
        return value
    found = _WRITABLE.get(value)  # type: ignore[call-overload]
    if found is not None:
        return found
    given = value.version if isinstance(value, Ngff04) else value
    why = "is read, never written" if given in _LEGACY else "is not supported"
    raise ValueError(f"ngff_version must be '0.4' or '0.5', got {given!r} (NGFF {given} {why})")
