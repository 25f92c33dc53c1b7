"""Moved to `agents.assets`, so `offhook worker` loads models without importing the app.

Kept so old imports go on working; new code imports `agents.assets`. Patch names (tests)
on `agents.assets`: this module only re-exports them.
"""

from agents.assets import (
    ASSETS,
    STT_ASSETS,
    Asset,
    AssetError,
    AssetFile,
    ModelCache,
    package_dir,
    sha256_of,
)

__all__ = [
    "ASSETS",
    "STT_ASSETS",
    "Asset",
    "AssetError",
    "AssetFile",
    "ModelCache",
    "package_dir",
    "sha256_of",
]
