"""The tile-stitching notebook as a plain script (cells as ``# %%`` blocks).

Exported from docs/notebooks/tile_stitching.ipynb for GPU hosts without Jupyter:
``MPLBACKEND=Agg python benchmarks/notebook_gpu.py`` from the
repository root runs the notebook top to bottom and prints its outputs (figures are not shown).
Do not edit: ``python tests/test_notebook.py`` rewrites it from the notebook.
"""

# ruff: noqa: E402, E501

# %% [markdown]
# # Tile stitching: from a mosaic grid to a stitched volume
#
# A serial-OCT acquisition images a tissue section as a grid of overlapping 3D tiles. linumpy stores
# them side by side as a *mosaic grid* `(Z, rows * tile_h, cols * tile_w)`, one zstd chunk per tile,
# in OME-Zarr. This notebook walks through the steps of `make demo`:
#
# 1. make the demo mosaic grid (synthetic tissue with a known tile layout),
# 2. project it along z (average intensity projection, AIP),
# 3. estimate the tile layout by phase correlation and compare it with the truth,
# 4. stitch with each blending mode,
# 5. time the pipeline's commands (`linum-estimate-transform`, `linum-stitch-3d`, `linum-aip`) as
#    a user runs them, on the CPU and, when one is present, on the GPU, with the pipeline
#    benchmark: where each run's time went.
#
# The notebook runs on the CPU (the test suite executes it, with a small benchmark mosaic); the
# GPU cells only run where cupy, nvCOMP and a CUDA device are usable. On a GPU machine without
# Jupyter, `python benchmarks/notebook_gpu.py` runs the same code (an export of this notebook).

# %%
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from linumpy.io import read_omezarr, read_volume
from linumpy.mosaic import (
    BLENDING_MODES,
    average_intensity_projection,
    estimate_transform_omezarr,
    make_demo_data,
    read_demo_truth,
    stitch,
    stitch_omezarr,
)

workdir = Path(tempfile.mkdtemp(prefix="linumpy-stitching-"))
plt.rcParams["figure.dpi"] = 60


def show(images, titles, width=4.5):
    fig, axes = plt.subplots(1, len(images), figsize=(width * len(images), width * 0.85))
    for ax, image, title in zip(np.atleast_1d(axes), images, titles):
        low, high = np.percentile(image, (0.5, 99.5))
        ax.imshow(image, cmap="gray", vmin=low, vmax=high)
        ax.set_title(title)
        ax.axis("off")
    plt.show()


# %% [markdown]
# ## 1. Demo tiles as a mosaic grid
#
# `make_demo_data` writes a 4 x 5 grid of 128 x 128 pixel tiles (32 planes here, to keep the notebook
# quick) with 20 % overlap, a small camera rotation and empty background tiles at the corners. The
# true layout is stored in the image's attributes.

# %%
mosaic_path = workdir / "mosaic.ome.zarr"
start = time.perf_counter()
demo = make_demo_data(mosaic_path, grid_shape=(4, 5), tile_shape=(32, 128, 128))
array, voxel_size = read_omezarr(mosaic_path)
print(
    f"mosaic grid {array.shape} {array.dtype}, chunks {array.chunks}, voxel size {voxel_size} um "
    f"({time.perf_counter() - start:.1f} s)"
)
print("fraction of tissue per tile:\n", np.round(demo.tissue_fraction, 2))

# %% [markdown]
# ## 2. Average intensity projection of the mosaic grid

# %%
aip = average_intensity_projection(mosaic_path)
depth_profile = read_volume(mosaic_path, region=(slice(None), slice(256, 257), slice(None)))[:, 0]
show([aip, depth_profile], ["AIP of the mosaic grid (tiles side by side)", "one y-plane (z down)"])

# %% [markdown]
# ## 3. Estimated tile layout
#
# Adjacent tiles are registered by phase correlation of their projections; pairs whose overlap does
# not correlate (background tiles) are ignored, and an affine map *tile index -> pixel position* is
# fitted to the rest.

# %%
transform, pairs = estimate_transform_omezarr(mosaic_path)
truth = read_demo_truth(mosaic_path)
used = sum(pair.score >= 0.3 for pair in pairs)
print(f"{used} of {len(pairs)} tile pairs used")
print(
    "estimated matrix:",
    np.round(transform.matrix, 3).tolist(),
    "offset",
    np.round(transform.offset, 3),
)
print("true matrix:     ", np.round(truth.matrix, 3).tolist(), "offset", np.round(truth.offset, 3))
print(f"largest tile position error: {transform.max_position_error(truth):.3f} px")

# %% [markdown]
# ## 4. Stitching with each blending mode
#
# `none` lets later tiles overwrite earlier ones (seams from the tiles' vignetting show), `average`
# takes the mean in the overlaps, `linear` cross-fades with ramps as wide as the overlap.

# %%
stitched_aips = {mode: stitch(aip, transform, mode) for mode in BLENDING_MODES}
show(list(stitched_aips.values()), [f"blending: {mode}" for mode in BLENDING_MODES])
y, x = transform.pixel_positions()[2, 2]  # where four tiles meet
zoom = (slice(y - 50, y + 50), slice(x - 50, x + 50))
show(
    [image[zoom] for image in stitched_aips.values()],
    [f"{mode}: where four tiles meet" for mode in BLENDING_MODES],
)

# %% [markdown]
# The 3D stitch writes an OME-Zarr with a pyramid in the tiles' dtype (uint16 here: the float32 blend rounded; `dtype=np.float32` keeps the fractions); here one plane of each level:

# %%
stitch_omezarr(mosaic_path, workdir / "stitched.ome.zarr", transform, blending="linear", n_levels=3)
levels = [read_omezarr(workdir / "stitched.ome.zarr", level) for level in range(3)]
for level, (data, size) in enumerate(levels):
    print(f"level {level}: shape {data.shape}, voxel size {size}")
show([data[data.shape[0] // 3] for data, _ in levels], [f"level {i}, plane Z/3" for i in range(3)])

# %% [markdown]
# ## 5. CPU and GPU: the pipeline benchmark
#
# `linum-benchmark-pipeline` times the commands above the way a user runs them: each one a separate
# process (`python -m linumpy.scripts.linum_stitch_3d ... -v`), first on the CPU, then with
# `--use-gpu`, page cache warm. Every command ends its `-v` output with a table of where its time
# went, which the benchmark reads back:
#
# - **start-up and imports**: the interpreter, numpy, zarr, dask (and cupy, nvCOMP), paid by every
#   process;
# - **CUDA context**: created once per process on the GPU (what is left of it once the imports
#   are done);
# - **kernel compilation**: cupy compiles each kernel with NVRTC the first time a machine needs it
#   and keeps it on disk (`~/.cupy/kernel_cache`, or `CUPY_CACHE_DIR`), linumpy its own kernels
#   with `cuda.core` (`~/.cache/linumpy/kernels`); later processes load them. The benchmark runs
#   each command once on the GPU before the run it measures, which then loads them. A `--use-gpu`
#   command creates its CUDA context and loads these kernels in a thread while its modules import;
# - **metadata**, **level 0** (the stitched or projected image), **pyramid**, **final swap** (the
#   new image moved into place), **registration** and **projection** for the layout estimate, and
#   **other**.
#
# Its library function, `run_pipeline_benchmark`, runs here on a 6 x 6 mosaic grid in linumpy's
# default layout: of 96 x 512 x 512 tiles with a GPU, of tiny tiles without one (this notebook runs
# in CI on two CPU cores).

# %%
from linumpy.bench.pipeline import PipelineConfig, pipeline_table, run_pipeline_benchmark
from linumpy.cli.parser import gpu_reason

reason = gpu_reason()
gpu = reason is None
print("GPU: usable" if gpu else f"GPU: not usable here ({reason}); the CPU half only")
tile = (96, 512, 512) if gpu else (8, 24, 24)
size = 6 * 6 * 2 * tile[0] * tile[1] * tile[2]  # bytes of a 6 x 6 grid of uint16 tiles
config = PipelineConfig(mosaics=(f"{size}b",), tile=tile)
result = run_pipeline_benchmark(config, workdir / "pipeline", log=print)
print()
print(pipeline_table(result))

# %% [markdown]
# At this notebook's CI size every command spends most of its time starting up: the work is a
# few milliseconds, so a single run there says nothing about the GPU. On a GPU host, the comparison at
# real sizes is one command:
#
# ```bash
# linum-benchmark-pipeline pipeline_out --mosaic 4gib 32gib
# ```
#
# It prints the table and writes it with every run's phases to
# `pipeline_out/benchmark_pipeline.json`, each command's log in `pipeline_out/logs`: the phases
# show where a GPU run still waits (start-up, level 0 or the pyramid).
#
# The [Benchmarks](../benchmarks.md) page has the newest table of each machine, generated from
# its result file.

# %%
import shutil

shutil.rmtree(workdir)
