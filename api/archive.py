"""A device's files as one deterministic zip (moved to `tuner.files.archive`, where publishing a
release builds it; re-exported here for the routes)."""

from __future__ import annotations

from tuner.files.archive import README_NAME, build_zip, readme_text

__all__ = ["README_NAME", "build_zip", "readme_text"]
