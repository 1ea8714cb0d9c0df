"""Response models of the HTTP API."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Health(BaseModel):
    """The service is up; which version and which store (password masked)."""

    status: Literal["ok"]
    version: str
    store: str


class ShapeCoverage(BaseModel):
    """One (N, K, block_shape) of a device: its M grid and which M have a winner."""

    N: int
    K: int
    block_shape: tuple[int, int]
    m_requested: list[int]
    m_covered: list[int]
    complete: bool
    file_name: str


class Device(BaseModel):
    """A device_name key in the store, with the coverage of each of its shapes."""

    device_name: str
    shapes: list[ShapeCoverage]


class ConfigFile(BaseModel):
    """One merged file of a device: its name as vLLM looks it up, hash and merge report."""

    file_name: str
    N: int
    K: int
    block_shape: tuple[int, int]
    sha256: str
    m_keys: list[int]
    partial: bool
    m_missing: list[int]
    notes: list[str]
    warnings: list[str]


class SkippedShape(BaseModel):
    """A shape with no file, and why (usually: M without a winner yet)."""

    N: int
    K: int
    block_shape: tuple[int, int]
    reason: str
    m_missing: list[int]


class DeviceConfigs(BaseModel):
    """All files of a device, and the shapes left out."""

    device_name: str
    files: list[ConfigFile]
    skipped: list[SkippedShape]
