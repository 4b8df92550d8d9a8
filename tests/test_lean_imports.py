"""A command's dask.array without the optional modules it never uses (linumpy.cli.lean_imports)."""

from __future__ import annotations

import importlib.machinery
import subprocess
import sys
import textwrap
from pathlib import Path

from linumpy.cli.lean_imports import _Hiding

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_dask_array_imports_without_the_skipped_modules_which_stay_importable() -> None:
    out = _python(
        """
        import sys
        from linumpy.cli.lean_imports import SKIPPED_BY_COMMANDS, lean_dask_array
        lean_dask_array()
        import dask.array as da
        print(sorted(n for n in (*SKIPPED_BY_COMMANDS, "pandas") if n in sys.modules))
        print(sum(type(finder).__name__ == "_LeanFinder" for finder in sys.meta_path))
        print(int(da.arange(10, chunks=3).sum().compute()))
        import scipy.sparse, xarray
        print(xarray.DataArray([1, 2]).sum().item(), scipy.sparse.eye(3).nnz)
        """
    )
    assert out.splitlines() == ["[]", "0", "45", "3 3"]  # the hook gone once used


def test_a_command_process_skips_them_and_main_called_from_python_does_not(tmp_path) -> None:
    from linumpy.mosaic.demo import make_demo_data

    source = tmp_path / "mosaic.ome.zarr"
    make_demo_data(source, grid_shape=(2, 2), tile_shape=(8, 32, 32))
    command = f"""
        import sys
        from scripts.linum_aip import main
        sys.argv = ["linum-aip", {str(source)!r}, {str(tmp_path / "aip.ome.zarr")!r}, "-f"]
        main()
        print("xarray" in sys.modules, "dask.array" in sys.modules)
        """
    assert _python(command).splitlines()[-1] == "False True"
    library = f"""
        import sys
        from scripts.linum_aip import main
        main([{str(source)!r}, {str(tmp_path / "aip2.ome.zarr")!r}])
        import importlib.util
        print(importlib.util.find_spec("xarray") is None or "xarray" in sys.modules)
        """
    assert _python(library).splitlines()[-1] == "True"


def test_nothing_is_hooked_once_dask_array_is_imported() -> None:
    import dask.array  # noqa: F401

    from linumpy.cli.lean_imports import _LeanFinder, lean_dask_array

    before = list(sys.meta_path)
    lean_dask_array()
    assert sys.meta_path == before
    assert not any(isinstance(finder, _LeanFinder) for finder in sys.meta_path)


def test_a_module_that_needs_a_hidden_one_is_executed_again_as_usual(tmp_path) -> None:
    (tmp_path / "lean_helper.py").write_text("ANSWER = 42\n")
    (tmp_path / "needs_helper.py").write_text("import lean_helper\nVALUE = lean_helper.ANSWER\n")
    sys.path.insert(0, str(tmp_path))
    try:
        spec = importlib.machinery.PathFinder.find_spec("needs_helper", [str(tmp_path)])
        loader = _Hiding(spec.loader, ["lean_helper"])
        module = loader.create_module(spec) or type(sys)("needs_helper")
        module.__spec__, module.__file__ = spec, spec.origin
        loader.exec_module(module)  # fails with lean_helper hidden, then runs as usual
        assert module.VALUE == 42 and sys.modules["lean_helper"].ANSWER == 42
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("lean_helper", None)


def test_aligning_dask_blocks_to_storage_never_imports_distributed() -> None:
    # dask's rechunk imports distributed (0.2-0.4 s) to look for a client unless told the method
    out = _python(
        """
        import sys
        import dask, dask.array as da
        from linumpy.io.dask_write import align_blocks
        x = align_blocks(da.ones((100, 30), chunks=(25, 30)), (16, 16))
        # linumpy computes local graphs with the threaded get (dask's default looks for a client)
        total = int(x.sum().compute(scheduler=dask.threaded.get))
        print(x.chunks[0], total, "distributed" in sys.modules)
        """
    )
    assert out == "(32, 32, 32, 4) 3000 False"
