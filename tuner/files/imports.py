"""Which device an imported config file is stored for (shared by `tuner import` and the API)."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.inputs.devices import matches, resolve


def target_device(requested: str | None, file_device: str, known: Sequence[str]) -> str:
    """The device an import is stored for.

    With no request, the device_name in the file's name. Otherwise a device already in the
    store (sweeps or imports) that the request names, aliases allowed ("L20"); or the file's own
    device when the request names it. Anything else is refused, so that a typo never creates a
    device.

    Args:
        requested: `--device` or the URL's device, or None.
        file_device: the device_name in the file's name.
        known: device_names with sweeps or imports.

    Returns:
        The device_name to store under.

    Raises:
        LookupError: the request names neither a known device nor the file's device.
    """
    if requested is None:
        return file_device
    names = [requested] if requested in known else resolve(requested, known)
    if len(names) == 1:
        return names[0]
    if matches(requested, file_device):
        return file_device
    listed = ", ".join(sorted(known)) or "(none)"
    raise LookupError(f"device {requested!r} is neither in the store (known: {listed}) nor the "
                      f"file's device {file_device!r}")
