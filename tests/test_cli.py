"""linumpy.cli: the scripts' checks of their inputs and outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from linumpy.cli import build_parser, check_input, check_output, output_folder


def _error(capsys: pytest.CaptureFixture[str], *args: object, **kwargs: object) -> str:
    parser = build_parser("Demo.", prog="linum-demo")
    with pytest.raises(SystemExit) as stop:
        check_output(parser, *args, **kwargs)
    assert stop.value.code == 2
    return capsys.readouterr().err


def test_an_output_url_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, "s3://lab/aip.ome.zarr", True)
    assert err.startswith("linum-demo: error: output 's3://lab/aip.ome.zarr': the scripts write")


def test_missing_parents_are_made_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nested = tmp_path / "new" / "out.ome.zarr"
    assert "no directory" in _error(capsys, nested, False)
    parser = build_parser("Demo.", prog="linum-demo")
    assert check_output(parser, nested, False, make_parents=True) == nested
    assert nested.parent.is_dir() and not nested.exists()


def test_an_output_never_overlaps_an_input_or_another_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser("Demo.", prog="linum-demo")
    check_input(parser, tmp_path)
    with pytest.raises(SystemExit):
        check_output(parser, tmp_path / "out.zarr", True)
    assert "is inside the input" in capsys.readouterr().err
    parser = build_parser("Demo.", prog="linum-demo")
    check_output(parser, tmp_path / "a.png", True)
    with pytest.raises(SystemExit):
        check_output(parser, tmp_path / "a.png", True)
    assert "is the output" in capsys.readouterr().err


def test_an_output_folder_is_made_and_removed_again_on_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser("Demo.", prog="linum-demo")
    with output_folder(parser, tmp_path / "out" / "job") as job:
        assert job.is_dir()
    with pytest.raises(RuntimeError), output_folder(parser, tmp_path / "new" / "job"):
        raise RuntimeError("failed")
    assert not (tmp_path / "new").exists()
    check_input(parser, tmp_path / "out")
    with pytest.raises(SystemExit), output_folder(parser, tmp_path / "out" / "job"):
        pass
    assert "is inside the input" in capsys.readouterr().err
