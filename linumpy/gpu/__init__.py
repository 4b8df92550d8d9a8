"""GPU I/O: nvCOMP zstd codec for zarr and batched reads into GPU memory (imports cupy lazily)."""
