"""The model cache: files assembled from installed packages, checked against pinned sha256."""

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import agents.assets
from agents.assets import Asset, AssetError, AssetFile, ModelCache

PART1 = b"first half of the weights;"
PART2 = b" second half of the weights."
CONFIG = b'{"layers": 2}'


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two tiny installed 'model packages' on sys.path, like the registry ones."""
    site = tmp_path / "site"
    for package, files in {
        "offhook_fake_weights_a": {"data/model.bin.part1": PART1, "data/config.json": CONFIG},
        "offhook_fake_weights_b": {"data/model.bin.part2": PART2},
    }.items():
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("raise ImportError('never imported')\n")
        for rel, data in files.items():
            (site / package / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / package / rel).write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    return site


def _model(*files: AssetFile, entry: str = "") -> Asset:
    return Asset("fake-model", "fake-weights-a fake-weights-b", files, entry=entry)


def _two_part(sha256: str = _sha256(PART1 + PART2)) -> AssetFile:
    return AssetFile(
        "model.bin",
        (
            ("offhook_fake_weights_a", "data/model.bin.part1"),
            ("offhook_fake_weights_b", "data/model.bin.part2"),
        ),
        sha256,
    )


def _config(sha256: str = _sha256(CONFIG)) -> AssetFile:
    return AssetFile("config.json", (("offhook_fake_weights_a", "data/config.json"),), sha256)


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Callable[[Asset], None]:
    def _install(asset: Asset) -> None:
        monkeypatch.setattr(agents.assets, "ASSETS", {asset.name: asset})

    return _install


@pytest.fixture
def cache(tmp_path: Path) -> ModelCache:
    return ModelCache(tmp_path / "cache")


def test_a_multi_part_file_is_assembled_by_concatenation(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(_model(_two_part()))
    folder = cache.path("fake-model")
    assert folder == cache.root / "fake-model"
    assert (folder / "model.bin").read_bytes() == PART1 + PART2


def test_a_single_part_file_is_assembled_as_is(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(_model(_config()))
    assert (cache.path("fake-model") / "config.json").read_bytes() == CONFIG


def test_the_path_is_the_entry_file_when_the_model_names_one(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(_model(_two_part(), _config(), entry="model.bin"))
    path = cache.path("fake-model")
    assert path == cache.root / "fake-model" / "model.bin"
    assert path.read_bytes() == PART1 + PART2


def test_a_sha256_mismatch_is_refused(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(_model(_two_part(sha256=_sha256(b"other weights"))))
    with pytest.raises(AssetError, match=r"fake-model/model\.bin: sha256 \w+ does not match"):
        cache.path("fake-model")


def test_a_refused_file_leaves_nothing_behind(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(_model(_two_part(sha256=_sha256(b"other weights"))))
    with pytest.raises(AssetError):
        cache.path("fake-model")
    assert list((cache.root / "fake-model").iterdir()) == []


def test_a_refused_single_part_file_leaves_the_package_intact(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(_model(_config(sha256=_sha256(b"other config"))))
    with pytest.raises(AssetError):
        cache.path("fake-model")
    assert list((cache.root / "fake-model").iterdir()) == []
    assert (packages / "offhook_fake_weights_a" / "data" / "config.json").read_bytes() == CONFIG


def test_the_refusal_names_the_packages_to_reinstall(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(_model(_two_part(sha256=_sha256(b"other weights"))))
    with pytest.raises(AssetError, match="reinstall fake-weights-a fake-weights-b"):
        cache.path("fake-model")


def test_a_verified_file_is_not_hashed_again(
    packages: Path,
    install: Callable[[Asset], None],
    cache: ModelCache,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(_model(_two_part()))
    cache.path("fake-model")
    hashed: list[Path] = []
    real_sha256_of = agents.assets.sha256_of

    def counting_sha256_of(path: Path, chunk: int = 1 << 20) -> str:
        hashed.append(path)
        return real_sha256_of(path, chunk)

    monkeypatch.setattr(agents.assets, "sha256_of", counting_sha256_of)
    cache.path("fake-model")
    assert hashed == []


def test_a_file_changed_after_it_was_verified_is_verified_again(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(_model(_two_part()))
    target = cache.path("fake-model") / "model.bin"
    target.write_bytes(b"tampered with")
    cache.path("fake-model")
    assert target.read_bytes() == PART1 + PART2


def test_a_file_changed_to_the_same_size_is_verified_again(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(_model(_two_part()))
    target = cache.path("fake-model") / "model.bin"
    verified_at = target.stat().st_mtime_ns
    target.write_bytes(bytes(len(PART1 + PART2)))
    # A later write: file systems stamp times coarsely, so say so explicitly.
    os.utime(target, ns=(verified_at + 10**9, verified_at + 10**9))
    cache.path("fake-model")
    assert target.read_bytes() == PART1 + PART2


def test_a_cached_file_with_the_right_bytes_needs_no_package(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(_model(_two_part()))
    folder = cache.path("fake-model")
    (folder / ".model.bin.sha256").unlink()
    (packages / "offhook_fake_weights_b" / "data" / "model.bin.part2").unlink()
    assert (cache.path("fake-model") / "model.bin").read_bytes() == PART1 + PART2


def test_a_missing_package_is_named_for_pip(
    cache: ModelCache, install: Callable[[Asset], None]
) -> None:
    install(
        Asset(
            "fake-model",
            "offhook-no-such-weights==1.0",
            (AssetFile("model.bin", (("offhook_no_such_weights", "model.bin"),), "0" * 64),),
        )
    )
    with pytest.raises(AssetError, match=r"needs the package\(s\) offhook-no-such-weights==1.0"):
        cache.path("fake-model")


def test_a_file_missing_from_an_installed_package_is_named(
    packages: Path, install: Callable[[Asset], None], cache: ModelCache
) -> None:
    install(
        _model(AssetFile("model.bin", (("offhook_fake_weights_a", "data/gone.bin"),), "0" * 64))
    )
    with pytest.raises(AssetError, match=r"gone\.bin is missing from package"):
        cache.path("fake-model")


def test_prepare_all_assembles_every_model_and_reports_progress(
    packages: Path, monkeypatch: pytest.MonkeyPatch, cache: ModelCache
) -> None:
    weights = Asset("weights", "fake-weights-a fake-weights-b", (_two_part(),), "model.bin")
    config = Asset("config", "fake-weights-a", (_config(),))
    monkeypatch.setattr(agents.assets, "ASSETS", {"weights": weights, "config": config})
    progress: list[str] = []
    paths = cache.prepare_all(progress.append)
    assert progress == ["weights", "config"]
    assert paths == {
        "weights": cache.root / "weights" / "model.bin",
        "config": cache.root / "config",
    }


def test_the_packaged_models_pin_a_sha256_for_every_file() -> None:
    for asset in agents.assets.ASSETS.values():
        for item in asset.files:
            assert len(item.sha256) == 64 and int(item.sha256, 16) >= 0, item.name
        assert not asset.entry or asset.entry in {item.name for item in asset.files}
