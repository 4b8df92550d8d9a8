"""NGFF format objects (linumpy.io.formats): what each version writes, the lookup's errors, and
the rule that no other module compares version strings or zarr formats itself."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy import settings
from linumpy.cli.options import NGFF_VERSIONS
from linumpy.errors import LinumpyError
from linumpy.io import save_omezarr
from linumpy.io.formats import (
    NGFF_04,
    NGFF_05,
    NgffLegacy,
    declared_version,
    for_zarr_format,
    format_of,
    writable_format,
)

ROOT = Path(__file__).resolve().parents[1]
#: The one module that compares versions and zarr formats.
FORMATS_MODULE = ROOT / "linumpy" / "io" / "formats.py"
_VERSION = re.compile(r"^\d+\.\d+")


def _is_version(node: ast.AST) -> bool:
    """A version string, or a tuple, list or set of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(_VERSION.match(node.value))
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_version(e) for e in node.elts)
    return False


def _names_zarr_format(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return name == "zarr_format"


def version_comparisons(source: str, where: str) -> list[str]:
    """Every comparison in ``source`` with a version string, or of a ``zarr_format`` with a
    number: ``where:line: code``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        numbers = any(isinstance(o, ast.Constant) and isinstance(o.value, int) for o in operands)
        if any(_is_version(o) for o in operands) or (
            numbers and any(_names_zarr_format(o) for o in operands)
        ):
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_rule_finds_version_and_zarr_format_comparisons() -> None:
    code = (
        'a = version == "0.5"\n'
        'b = declared not in ("0.4", "0.5")\n'
        "c = 3 if meta.zarr_format == 2 else 2\n"
        'd = fmt.version\ne = {"version": "0.5"}\nf = zarr_format\n'
    )
    assert [line.split(": ")[0] for line in version_comparisons(code, "x.py")] == [
        "x.py:1",
        "x.py:2",
        "x.py:3",
    ]


def test_only_the_formats_module_compares_versions() -> None:
    found = []
    for folder in (ROOT / "linumpy", ROOT / "scripts"):
        for path in sorted(folder.rglob("*.py")):
            if path != FORMATS_MODULE:
                where = str(path.relative_to(ROOT))
                found += version_comparisons(path.read_text(), where)
    assert not found, "ask the format objects of linumpy.io.formats instead:\n" + "\n".join(found)


def test_format_of_versions_attributes_and_zarr_formats() -> None:
    assert format_of("0.4") is NGFF_04 and format_of(NGFF_05) is NGFF_05
    assert format_of({"ome": {"version": "0.5", "multiscales": []}}) is NGFF_05
    assert format_of({"multiscales": [{"version": "0.4"}]}) is NGFF_04
    assert format_of({"linumpy": {}}) is None
    assert for_zarr_format(2) is NGFF_04 and for_zarr_format(3) is NGFF_05
    legacy = format_of({"multiscales": [{"version": "0.3"}]})
    assert isinstance(legacy, NgffLegacy) and str(legacy) == "0.3" and not legacy.writable
    assert legacy.validated_part({"multiscales": [{"version": "0.3"}]}) is None
    with pytest.raises(ValueError, match="zarr format 4"):
        for_zarr_format(4)


@pytest.mark.parametrize("version", ["0.6", "1.0", "0.6.dev4"])
def test_unknown_versions_are_named_in_one_line(version: str) -> None:
    with pytest.raises(LinumpyError, match=f"^a.zarr: an NGFF {version} image; linumpy reads"):
        format_of({"ome": {"version": version}}, source="a.zarr")
    with pytest.raises(ValueError, match=f"NGFF '{version}' is not a version linumpy knows"):
        format_of(version)
    with pytest.raises(ValueError, match=f"got '{version}' \\(NGFF {version} is not supported\\)"):
        writable_format(version)


@pytest.mark.parametrize("version", ["0.1", "0.2", "0.3"])
def test_older_versions_are_read_never_written(version: str) -> None:
    assert format_of(version).version == version
    with pytest.raises(ValueError, match=f"NGFF {version} is read, never written"):
        writable_format(version)
    with pytest.raises(ValueError, match="ngff_version must be '0.4' or '0.5'"):
        writable_format(format_of(version))


def test_the_scripts_offer_the_versions_linumpy_writes() -> None:
    written = [v for v in NGFF_VERSIONS if writable_format(v)]
    assert written == list(NGFF_VERSIONS) == [NGFF_04.version, NGFF_05.version]


@pytest.mark.parametrize("fmt", [NGFF_04, NGFF_05], ids=str)
def test_each_format_describes_what_is_written(tmp_path: Path, fmt) -> None:
    """The attributes file, zarr format, codecs and key encoding of a written image are the ones
    its format object names, and its attributes declare it."""
    path = tmp_path / "image.ome.zarr"
    save_omezarr(np.zeros((4, 8, 8), np.uint16), path, voxel_size=(1, 1, 1), ngff_version=str(fmt))
    attrs_file = json.loads((path / fmt.attributes_file).read_text())
    attrs = attrs_file.get("attributes", attrs_file)
    assert format_of(attrs) is fmt and declared_version(attrs) == fmt.version
    assert fmt.validated_part(attrs) is not None
    if fmt is NGFF_04:  # 0.5's models leave 0.4 attributes alone
        assert NGFF_05.validated_part(attrs) is None
    array = zarr.open_array(path / "0", mode="r")
    assert array.metadata.zarr_format == fmt.zarr_format
    assert for_zarr_format(array.metadata.zarr_format) is fmt
    assert fmt.sharding or array.shards is None
    if fmt.codec_pipeline:
        names = [type(c).__name__ for c in array.metadata.codecs]  # not sharded: too small
        assert names[-2:] == ["ZstdCodec", "Crc32cCodec"]
        assert array.metadata.dimension_names == ("z", "y", "x")
    else:
        zarray = json.loads((path / "0" / ".zarray").read_text())
        assert zarray["compressor"] == {"id": "zstd", "level": settings.get().zstd_level}
        assert zarray["dimension_separator"] == "/"


def test_convert_attrs_moves_versioned_keys() -> None:
    v04 = {"image-label": {"version": "0.4", "colors": []}, "labels": ["a"], "x": 1}
    v05 = NGFF_05.convert_attrs(v04)
    assert v05 == {
        "x": 1,
        "ome": {"version": "0.5", "image-label": {"colors": []}, "labels": ["a"]},
    }
    # a version is restated where 0.4 metadata stated one
    assert NGFF_04.convert_attrs(v04) == v04
    assert NGFF_04.convert_attrs(v05) == {"image-label": {"colors": []}, "labels": ["a"], "x": 1}
    assert NGFF_04.with_ome({"multiscales": []}, "omero", {}) == {"multiscales": [], "omero": {}}
