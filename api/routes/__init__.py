"""One FastAPI router per resource: devices and their files, imports, mounts, the report,
sweeps, health and metrics."""
