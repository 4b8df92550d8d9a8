"""An absurd output is refused before any work: the stitch checks its output's size (against a
stated limit and the room on the disk) before planning, in one line naming the output, its shape
and size; ``-v`` states the shape and size first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from linumpy.errors import LinumpyError
from linumpy.io.output_size import check_output_size
from linumpy.mosaic.demo import make_demo_data, read_demo_truth
from linumpy.mosaic.transform import TileTransform


@pytest.fixture
def grid(tmp_path: Path) -> tuple[Path, TileTransform]:
    path = tmp_path / "grid.ome.zarr"
    make_demo_data(path, grid_shape=(2, 2), tile_shape=(8, 32, 32))
    return path, read_demo_truth(path)


@pytest.mark.parametrize("step", [1e12, 1e7])
def test_absurd_transform_is_refused_in_one_line(
    tmp_path: Path, grid: tuple[Path, TileTransform], step: float, capsys
) -> None:
    from linumpy.scripts.linum_stitch_3d import main

    source, truth = grid
    TileTransform([[step, 0], [0, step]], (0, 0), truth.tile_shape, truth.grid_shape).save(
        tmp_path / "absurd.json"
    )
    output = tmp_path / "stitched.ome.zarr"
    with pytest.raises(SystemExit) as caught:
        main([str(source), str(tmp_path / "absurd.json"), str(output)])
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert f"{output}: the stitched image of shape (8, " in err and "TiB" in err
    assert not output.exists()


def test_verbose_states_the_output_size_first(
    tmp_path: Path, grid: tuple[Path, TileTransform], capsys
) -> None:
    from linumpy.scripts.linum_stitch_3d import main

    source, truth = grid
    truth.save(tmp_path / "transform.json")
    output = tmp_path / "stitched.ome.zarr"
    main([str(source), str(tmp_path / "transform.json"), str(output), "-v"])
    shape = (8, *truth.normalized().output_shape())
    lines = [line for line in capsys.readouterr().err.splitlines() if "linumpy" in line]
    first = next(i for i, line in enumerate(lines) if "stitched image" in line)
    assert f"stitched image {shape}, " in lines[first] and "KiB uncompressed" in lines[first]
    assert not any("stitched" in line and "->" in line for line in lines[:first])


def test_stated_limit_and_disk_room(tmp_path: Path, grid: tuple[Path, TileTransform]) -> None:
    from linumpy.mosaic.pipeline import stitch_omezarr

    source, truth = grid
    with pytest.raises(LinumpyError, match=r"more than the 1000 bytes allowed"):
        stitch_omezarr(source, tmp_path / "out.ome.zarr", truth, max_output_bytes=1000)
    assert not (tmp_path / "out.ome.zarr").exists()
    with pytest.raises(LinumpyError, match="times the .* free in"):
        check_output_size((2**20, 2**20, 2**20), "float32", tmp_path / "x", max_bytes=2**80)


def test_complex_input_is_refused_with_the_magnitude_named(tmp_path: Path, capsys) -> None:
    import numpy as np

    from linumpy.io import save_omezarr
    from linumpy.scripts.linum_aip import main

    volume = (np.arange(4 * 8 * 8) * (1 + 1j)).reshape(4, 8, 8).astype(np.complex64)
    save_omezarr(volume, tmp_path / "complex.ome.zarr", voxel_size=(1, 1, 1))
    with pytest.raises(SystemExit) as caught:
        main([str(tmp_path / "complex.ome.zarr"), str(tmp_path / "aip.ome.zarr")])
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "complex data (complex64)" in err and "magnitude" in err
    assert not (tmp_path / "aip.ome.zarr").exists()


@pytest.mark.parametrize("shape", [(1, 1, 4, 8, 8), (1, 4, 8, 8)], ids=["tczyx", "czyx"])
def test_volume_with_leading_axes_of_one_is_projected(tmp_path: Path, shape: tuple) -> None:
    import numpy as np

    from linumpy.io import Axis, save_omezarr
    from linumpy.io.omezarr import read_coordinates
    from linumpy.scripts.linum_aip import main

    volume = np.arange(int(np.prod(shape)), dtype=np.uint16).reshape(shape)
    names = "tczyx"[-len(shape) :]
    axes = [Axis(n, None, "nanometer" if n in "zyx" else None) for n in names]
    save_omezarr(volume, tmp_path / "v.ome.zarr", voxel_size=(1,) * (len(shape) - 3) + (5, 2, 2),
                 axes=axes, translation=(0,) * (len(shape) - 3) + (7, 8, 9))  # fmt: skip
    main([str(tmp_path / "v.ome.zarr"), str(tmp_path / "aip.ome.zarr")])
    from linumpy.io import read_volume

    aip = read_volume(tmp_path / "aip.ome.zarr")
    np.testing.assert_allclose(aip, volume.reshape(shape[-3:]).mean(axis=0), rtol=1e-6)
    coordinates = read_coordinates(tmp_path / "aip.ome.zarr")
    assert [a.name for a in coordinates.axes] == ["y", "x"]
    assert [a.unit for a in coordinates.axes] == ["nanometer"] * 2
    assert coordinates.scale == (2.0, 2.0) and coordinates.translation == (8.0, 9.0)


def test_text_named_npy_is_one_line_without_unsafe_advice(tmp_path: Path, capsys) -> None:
    from linumpy.scripts.linum_convert_to_omezarr import main

    (tmp_path / "notes.npy").write_text("not an array\n")
    with pytest.raises(SystemExit) as caught:
        main([str(tmp_path / "notes.npy"), str(tmp_path / "out.ome.zarr")])
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not a .npy array of numbers" in err
    assert "unsafe" not in err and "allow_pickle" not in err


def test_levels_stop_at_one_voxel(tmp_path: Path, caplog) -> None:
    import numpy as np

    from linumpy.io import read_omezarr, save_omezarr

    with caplog.at_level("WARNING", logger="linumpy.io.writer"):
        save_omezarr(np.ones((4, 16, 8), np.uint8), tmp_path / "a", voxel_size=(1, 1, 1),
                     n_levels=50)  # fmt: skip
    assert "writing 5 levels" in caplog.text
    assert read_omezarr(tmp_path / "a", level=4)[0].shape == (1, 1, 1)
    with pytest.raises(LinumpyError, match="levels 0 to 4"):
        read_omezarr(tmp_path / "a", level=5)


def test_remote_install_hint_names_a_package_that_is_linumpys() -> None:
    from linumpy.io.remote import REMOTE_INSTALL_HINT

    assert "pip install obstore" in REMOTE_INSTALL_HINT
    assert "linumpy[" not in REMOTE_INSTALL_HINT  # "linumpy" on the index is another project


def test_second_of_two_writers_to_one_output_is_told(tmp_path: Path) -> None:
    import numpy as np

    from linumpy.io import OmeZarrWriter, read_volume
    from linumpy.io.staging import StagedWrite

    target = tmp_path / "result.txt"
    first, second = StagedWrite(target), StagedWrite(target)
    first.path.write_text("first")
    second.path.write_text("second")
    first.commit()
    with pytest.raises(LinumpyError, match="changed by another writer while this one ran"):
        second.commit()
    assert target.read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.txt"]  # nothing left behind

    image = tmp_path / "image.ome.zarr"
    kwargs = dict(voxel_size=(1, 1), always_stage=True)
    one = OmeZarrWriter(image, (4, 4), np.uint8, **kwargs)
    two = OmeZarrWriter(image, (4, 4), np.uint8, **kwargs)
    one[...], two[...] = np.full((4, 4), 1, np.uint8), np.full((4, 4), 2, np.uint8)
    one.finalize()
    with pytest.raises(LinumpyError, match="another writer"):
        two.finalize()
    assert (read_volume(image) == 1).all()


def test_png_of_nan_voxels_without_warning(tmp_path: Path) -> None:
    import warnings

    import numpy as np
    from PIL import Image

    from linumpy.mosaic.pipeline import save_png

    image = np.arange(16, dtype=np.float32).reshape(4, 4)
    image[0, :2] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_png(image, tmp_path / "preview.png")
    pixels = np.asarray(Image.open(tmp_path / "preview.png"))
    assert pixels[0, 0] == 0 and pixels[-1, -1] == 255
