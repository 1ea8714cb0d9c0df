"""Ready-to-paste read-only mounts of a device's files (docker, compose or Kubernetes)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import PlainTextResponse

from api.deps import SessionDep, SettingsDep
from api.routes.devices import (
    AllowStale,
    Engine,
    KnownDevice,
    OutDtype,
    Partial,
    store_files,
)
from tuner.files.archive import versions_line, winner_versions
from tuner.files.mounts import (
    DEFAULT_HOST_DIR,
    DEFAULT_SITE_PACKAGES,
    MountRequest,
    render_mounts,
)

router = APIRouter(prefix="/devices", tags=["mounts"])


@router.get("/{device_name}/mounts", response_class=PlainTextResponse, response_model=None,
            responses={200: {"content": {"text/plain": {}}},
                       404: {"description": "Unknown device, or no files to mount"},
                       422: {"description": "Bad site-packages path or format"}},
            description=(
    "The same text as `tuner mounts --device ...`: one read-only mount per file of the "
    "device, commented, to paste. 404 for an unknown device or no files (saying how many "
    "stale trials were left out); 409 if the winners cannot be merged; 422 for a bad "
    "site-packages path, engine or Triton version, or a bad allow_stale."))
def read_mounts(
    device_name: KnownDevice, session: SessionDep, settings: SettingsDep,
    engine: Engine = "vllm",
    site_packages: Annotated[str | None, Query(
        max_length=512, description="The engine's site-packages folder in the container "
        "(default: the usual image's, as `tuner mounts` prints it).")] = None,
    format: Annotated[Literal["docker", "compose", "k8s"], Query(
        description="docker run flags, a compose volumes list, or a Kubernetes ConfigMap with "
        "volume mounts.")] = "docker",
    host_dir: Annotated[str, Query(max_length=512, description="Host folder holding the "
                                   "exported files.")] = DEFAULT_HOST_DIR,
    partial: Partial = None, out_dtype: OutDtype = None, allow_stale: AllowStale = False,
    engine_version: Annotated[str | None, Query(
        max_length=64, description="The engine's release in the image, which decides its "
        "config folders (default: vLLM 0.33.0, SGLang 0.5.23).")] = None,
    triton_version: Annotated[str | None, Query(
        max_length=64, description="SGLang: the image's Triton, e.g. 3.8.0; fused-MoE files go "
        "to configs/triton_3_8_0/ (default: the Triton the files were tuned with).")] = None,
) -> PlainTextResponse:
    """Render read-only mounts of the device's files, as `tuner mounts` does."""
    allow = settings.allow_partial if partial is None else partial
    read = store_files(session, device_name, partial=allow, out_dtype=out_dtype, engine=engine,
                       allow_stale=allow_stale)
    merged = read.files
    if not merged.files:
        stale = read.view.scope.stale_trials
        hint = (f"; {stale} ok trial(s) of another kernel or Triton left out "
                "(?allow_stale=true uses them)" if stale else "")
        raise HTTPException(404, detail=f"{device_name} has no complete file to mount yet; "
                                        f"?partial=true mounts what there is{hint}")
    versions = winner_versions(read.view.environments, read.view.winners)
    tuned_triton = versions["triton"][0] if len(versions["triton"]) == 1 else None
    try:
        text = render_mounts(MountRequest(
            device_name=device_name, engine=engine,
            file_names=tuple(f.file_name for f in merged.files), host_dir=host_dir,
            site_packages=site_packages or DEFAULT_SITE_PACKAGES[engine], fmt=format,
            compute_capability=read.view.compute_capability,
            tuned_with=versions_line(versions), engine_version=engine_version,
            triton_version=triton_version or tuned_triton,
            triton_from="as asked" if triton_version else "the one the files were tuned with",
        ))
    except ValueError as exc:
        raise HTTPException(422, detail=str(exc)) from None
    return PlainTextResponse(text)
