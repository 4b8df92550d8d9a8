"""linumpy.settings: defaults, LINUMPY_* variables, set(), resolve() and per-call settings."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from zarr_layouts import make_array, sample_data

from linumpy import settings
from linumpy.errors import LinumpyError, SettingsError
from linumpy.io import read_volume
from linumpy.settings import MIB, Settings

# A valid value per field (as text for its variable, and what it parses to), and invalid texts.
GOOD = {
    "io_threads": ("3", 3),
    "zstd_level": ("7", 7),
    "chunk_bytes": ("512", 512 * 1024),
    "write_checksum": ("off", False),
    "durable": ("0", False),
    "fetch": ("pread", "pread"),
    "scratch_bytes": ("32", 32 * MIB),
    "remote_timeout": ("2.5", 2.5),
    "remote_retries": ("0", 0),
    "remote_requests": ("16", 16),
}
BAD = {
    "io_threads": ["0", "-2", "four", "2.5", ""],
    "zstd_level": ["0", "23", "-1", "fast", ""],
    "chunk_bytes": ["0", "1MiB", "-4"],
    "write_checksum": ["maybe", "2", ""],
    "durable": ["sometimes", ""],
    "fetch": ["gds", "PREAD", ""],
    "scratch_bytes": ["0", "lots"],
    "remote_timeout": ["0", "soon", "inf", "-1"],
    "remote_retries": ["-1", "many"],
    "remote_requests": ["0", "AUTO", "8.5", ""],
}
# Invalid keyword values per field.
BAD_VALUES = {
    "io_threads": [0, -1, 2.0, True, "4"],
    "zstd_level": [0, 23, 2.0, True, "3"],
    "chunk_bytes": [0, 1.5, "1024"],
    "write_checksum": [1, "yes", None],
    "durable": [0, "no"],
    "fetch": ["gds", None, 1],
    "scratch_bytes": [0, 1.5, None],
    "remote_timeout": [0, -1.0, float("nan"), True, "30"],
    "remote_retries": [-1, 1.5, True],
    "remote_requests": [0, None, "8", True],
}
ENV = {name: spec.variable for name, spec in settings.declarations().items()}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No LINUMPY_* variable of the settings set in the environment."""
    for variable in (*ENV.values(), *settings.REMOVED_VARIABLES):
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_tables_cover_every_field() -> None:
    names = [f.name for f in dataclasses.fields(Settings)]
    assert sorted(ENV) == sorted(names) == sorted(GOOD) == sorted(BAD) == sorted(BAD_VALUES)
    assert len(names) <= 10  # the settings a user needs; tuning is fixed in the code
    variables = list(ENV.values())
    assert len(set(variables)) == len(variables)
    assert all(v.startswith("LINUMPY_") for v in variables)
    assert not set(variables) & set(settings.REMOVED_VARIABLES)


def test_the_docs_table_comes_from_the_declarations() -> None:
    """The module's table (the API reference's) lists every setting, in the order of the fields."""
    module = settings.__doc__ or ""
    rows = [line for line in module.splitlines() if line.startswith("   * - ``")]
    assert rows == [f"   * - ``{name}``" for name in ENV]
    for variable in ENV.values():
        assert f"     - ``{variable}``" in module


@pytest.mark.parametrize("variable", sorted(settings.REMOVED_VARIABLES))
def test_a_removed_variable_warns_once_and_is_ignored(
    clean_env: pytest.MonkeyPatch, variable: str
) -> None:
    clean_env.setattr(settings, "_warned", set())
    clean_env.setenv(variable, "not even valid")
    with pytest.warns(FutureWarning, match=f"{variable} is no longer read"):
        assert Settings.from_env() == Settings()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        settings.get()  # once per process


def test_defaults(clean_env: pytest.MonkeyPatch) -> None:
    defaults = Settings()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert defaults.io_threads == cpus
    assert (defaults.scratch_bytes, defaults.fetch, defaults.chunk_bytes) == (
        2048 * MIB,
        "auto",
        MIB,
    )
    assert defaults.write_checksum is defaults.durable is True
    assert (defaults.remote_timeout, defaults.remote_retries) == (30.0, 3)
    assert defaults.remote_requests == "auto"
    assert defaults.zstd_level == 2
    assert Settings.from_env() == defaults == settings.get()


def test_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().io_threads = 2  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(GOOD))
def test_each_variable_sets_its_field(clean_env: pytest.MonkeyPatch, name: str) -> None:
    variable = ENV[name]
    text, value = GOOD[name]
    clean_env.setenv(variable, text)
    assert getattr(Settings.from_env(), name) == value
    assert getattr(settings.get(), name) == value
    others = {f: getattr(Settings(), f) for f in ENV if f != name}
    assert {f: getattr(settings.get(), f) for f in others} == others
    # An explicit override wins over the environment.
    override = Settings()
    assert getattr(Settings.from_env(**{name: getattr(override, name)}), name) == getattr(
        override, name
    )


@pytest.mark.parametrize(("text", "value"), [("1", 1.0), ("0.5", 0.5), ("1e1", 10.0)])
def test_timeout_variable_takes_decimals(
    clean_env: pytest.MonkeyPatch, text: str, value: float
) -> None:
    clean_env.setenv("LINUMPY_REMOTE_TIMEOUT", text)
    assert Settings.from_env().remote_timeout == value
    assert isinstance(Settings(remote_timeout=3).remote_timeout, float)


@pytest.mark.parametrize("text", ["1", "true", "YES", "on"])
def test_checksum_variable_true_spellings(clean_env: pytest.MonkeyPatch, text: str) -> None:
    clean_env.setenv("LINUMPY_ZSTD_CHECKSUM", text)
    assert Settings.from_env().write_checksum is True


@pytest.mark.parametrize(
    ("name", "text"), [(name, text) for name, texts in sorted(BAD.items()) for text in texts]
)
def test_bad_variable_raises_naming_it(clean_env: pytest.MonkeyPatch, name: str, text: str) -> None:
    variable = ENV[name]
    clean_env.setenv(variable, text)
    for make in (Settings.from_env, settings.get, lambda: settings.resolve(None)):
        with pytest.raises(SettingsError, match=variable) as info:
            make()
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, LinumpyError)
        assert text in str(info.value)  # the value given is quoted back


@pytest.mark.parametrize(
    ("name", "value"), [(name, v) for name, values in sorted(BAD_VALUES.items()) for v in values]
)
def test_bad_keyword_value_raises_naming_the_field(name: str, value: object) -> None:
    with pytest.raises(SettingsError, match=f"^{name} must be"):
        Settings(**{name: value})  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match=name):
        settings.resolve({name: value})
    with pytest.raises(SettingsError, match=name):
        settings.set(**{name: value})
    assert settings.get() == Settings.from_env()  # a refused set() changed nothing


def test_set_is_a_context_manager_that_nests(clean_env: pytest.MonkeyPatch) -> None:
    base = settings.get()
    with settings.set(io_threads=2, fetch="pread") as outer:
        assert isinstance(outer, settings.set)
        assert (settings.get().io_threads, settings.get().fetch) == (2, "pread")
        with settings.set(io_threads=5, zstd_level=9):
            now = settings.get()
            assert (now.io_threads, now.fetch, now.zstd_level) == (5, "pread", 9)
        now = settings.get()
        assert (now.io_threads, now.fetch, now.zstd_level) == (2, "pread", base.zstd_level)
    assert settings.get() == base


def test_set_layers_over_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LINUMPY_IO_THREADS", "7")
    clean_env.setenv("LINUMPY_ZSTD_LEVEL", "3")
    with settings.set(io_threads=2):
        assert (settings.get().io_threads, settings.get().zstd_level) == (2, 3)
    assert settings.get().io_threads == 7


def test_set_restores_after_an_exception() -> None:
    base = settings.get()
    with pytest.raises(RuntimeError), settings.set(scratch_bytes=4096):
        raise RuntimeError("inside")
    assert settings.get() == base


def test_overlapping_sets_leave_in_any_order() -> None:
    base = settings.get()
    first = settings.set(io_threads=2)
    second = settings.set(io_threads=3)
    assert settings.get().io_threads == 3
    first.__exit__(None, None, None)  # the older one leaves first
    assert settings.get().io_threads == 3
    second.__exit__(None, None, None)
    assert settings.get() == base


def test_set_is_seen_by_other_threads() -> None:
    seen: list[Settings] = []
    ready, done = threading.Event(), threading.Event()

    def worker() -> None:
        ready.wait(10)
        seen.append(settings.get())
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    with settings.set(io_threads=3, zstd_level=5):
        ready.set()
        assert done.wait(10)
    thread.join(10)
    assert (seen[0].io_threads, seen[0].zstd_level) == (3, 5)


def test_set_rejects_unknown_names() -> None:
    with pytest.raises(SettingsError, match="unknown setting.*threads.*known: io_threads"):
        settings.set(threads=2)


def test_resolve(clean_env: pytest.MonkeyPatch) -> None:
    assert settings.resolve(None) == settings.get()
    assert settings.resolve({}) == settings.get()
    explicit = Settings(io_threads=1, fetch="pread")
    with settings.set(io_threads=4):
        assert settings.resolve(explicit) is explicit  # a Settings is taken as it is
        updated = settings.resolve({"fetch": "pread"})
        assert (updated.io_threads, updated.fetch) == (4, "pread")  # a dict updates get()
    with pytest.raises(SettingsError, match="unknown setting.*gpu_streams"):
        settings.resolve({"gpu_streams": 2, "io_threads": 1})  # a tuning knob, no longer public


# --- settings of one read_volume call ----------------------------------------------------------


@pytest.fixture
def volume(tmp_path: Path) -> tuple[Path, np.ndarray]:
    data = sample_data((20, 24, 40), "uint16")
    make_array(tmp_path / "a.zarr", "v3-sharded", data, chunks=(8, 8, 16))
    return tmp_path / "a.zarr", data


@pytest.mark.parametrize("given", [{"io_threads": 1}, {"io_threads": 3}, Settings(io_threads=1)])
def test_read_volume_takes_settings_per_call(
    volume: tuple[Path, np.ndarray], given: object
) -> None:
    path, data = volume
    region = (slice(3, 17), slice(0, 20))
    result = read_volume(path, region=region, settings=given)  # type: ignore[arg-type]
    assert result.tobytes() == data[region].tobytes()


def _decode_threads_started(read: Callable[[], object]) -> set[str]:
    """Names of the CPU back end's decoding threads started while ``read`` runs."""
    names: set[str] = set()

    def record(*_: object) -> None:
        names.add(threading.current_thread().name)
        sys.setprofile(None)  # one record per thread is enough

    threading.setprofile(record)
    try:
        read()
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    return {name for name in names if name.startswith("linumpy-decode")}


def test_read_volume_settings_set_the_decoding_threads(volume: tuple[Path, np.ndarray]) -> None:
    path, data = volume
    results: list[np.ndarray] = []
    with settings.set(io_threads=3):
        three = _decode_threads_started(lambda: results.append(read_volume(path)))
        one = _decode_threads_started(
            lambda: results.append(read_volume(path, settings={"io_threads": 1}))
        )
    assert 1 <= len(three) <= 3  # how many start depends on timing
    assert one == set()
    assert all(r.tobytes() == data.tobytes() for r in results)


@pytest.mark.parametrize(
    "bad", [{"io_threads": 0}, {"fetch": "nvme"}, {"no_such_setting": 1}, {"scratch_bytes": -1}]
)
def test_read_volume_rejects_bad_settings_before_reading(tmp_path: Path, bad: dict) -> None:
    # The path does not exist: the settings error comes first, so nothing was opened or read.
    with pytest.raises(SettingsError, match=next(iter(bad))):
        read_volume(tmp_path / "missing.zarr", settings=bad)


def test_read_volume_reads_the_environment(
    volume: tuple[Path, np.ndarray], clean_env: pytest.MonkeyPatch
) -> None:
    path, data = volume
    clean_env.setenv("LINUMPY_IO_THREADS", "1")
    assert read_volume(path).tobytes() == data.tobytes()
    clean_env.setenv("LINUMPY_IO_THREADS", "none")
    with pytest.raises(SettingsError, match="LINUMPY_IO_THREADS"):
        read_volume(path)
