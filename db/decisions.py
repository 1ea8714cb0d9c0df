"""Noise control and ceilings in the store: a task's re-timed finalists and the config it keeps,
and the bandwidth and throughput ceilings measured on a GPU.

Re-exported by `db.repo`; like the repository functions these take a Session and never commit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from db.models import DECISION_KEPT, Ceiling, Decision, Device, Environment, Retime, utcnow
from db.tasks import end_trial
from tuner.core import CONFIG_KEYS

RETIME_KEYS = frozenset({"config", "is_default", "rounds", "latency_us", "p20_us", "p80_us"})
DECISION_KEYS = frozenset(
    {"config", "latency_us", "default_latency_us", "runner_up", "spread_us", "kept", "note"}
)


@dataclass(frozen=True)
class RetimeInfo:
    """One re-timed config of a task: medians and percentiles in microseconds over `rounds`."""

    config: dict[str, int]
    is_default: bool
    rounds: int
    latency_us: float
    p20_us: float
    p80_us: float


@dataclass(frozen=True)
class DecisionInfo:
    """The config a task keeps after re-timing (`kept`: fastest, default or simpler), its and
    the default's re-timed latency, the spread it had to beat, and the re-timed configs
    (`retimes`, fastest first). Latencies in microseconds."""

    decision_id: int
    task_id: int
    environment_id: int
    config: dict[str, int]
    latency_us: float
    default_latency_us: float | None
    runner_up: dict[str, int] | None
    spread_us: float
    kept: str
    note: str
    created_at: datetime
    retimes: tuple[RetimeInfo, ...]


def _config(value: object, what: str) -> dict[str, int]:
    if not isinstance(value, Mapping) or set(value) != set(CONFIG_KEYS):
        keys = sorted(value) if isinstance(value, Mapping) else type(value).__name__
        raise ValueError(f"{what}: keys {keys} are not {', '.join(CONFIG_KEYS)}")
    return {name: _positive_int(value[name], f"{what}: {name}") for name in CONFIG_KEYS}


def _positive_int(value: object, what: str) -> int:
    try:
        whole = int(value)  # type: ignore[call-overload]
        ok = not isinstance(value, bool) and whole == value and whole >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return whole


def _number(value: object) -> float | None:
    """value as a finite float, or None when it is not a finite number."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _us(value: object, what: str) -> float:
    number = _number(value)
    if number is None or number < 0:
        raise ValueError(f"{what} must be a finite number of microseconds >= 0, got {value!r}")
    return number


def _retime_row(item: Mapping, index: int) -> dict:
    what = f"retimes[{index}]"
    if set(item) != RETIME_KEYS:
        raise ValueError(f"{what}: keys {sorted(item)} are not {sorted(RETIME_KEYS)}")
    row = {
        **_config(item["config"], f"{what}.config"),
        "is_default": bool(item["is_default"]),
        "rounds": _positive_int(item["rounds"], f"{what}: rounds"),
        **{name: _us(item[name], f"{what}.{name}") for name in ("latency_us", "p20_us", "p80_us")},
    }
    if not row["p20_us"] <= row["latency_us"] <= row["p80_us"]:
        raise ValueError(
            f"{what}: need p20_us <= latency_us <= p80_us, got {row['p20_us']}, "
            f"{row['latency_us']}, {row['p80_us']}"
        )
    return row


def _decision_row(decision: Mapping, configs: list[dict[str, int]]) -> dict:
    if set(decision) != DECISION_KEYS:
        raise ValueError(f"decision: keys {sorted(decision)} are not {sorted(DECISION_KEYS)}")
    config = _config(decision["config"], "decision.config")
    if config not in configs:
        raise ValueError("decision.config is not one of the re-timed configs")
    if decision["kept"] not in DECISION_KEPT:
        raise ValueError(
            f"decision.kept {decision['kept']!r} is not one of {', '.join(DECISION_KEPT)}"
        )
    if not isinstance(decision["note"], str):
        raise ValueError("decision.note must be text")
    default_us = decision["default_latency_us"]
    runner_up = decision["runner_up"]
    return {
        **config,
        "latency_us": _us(decision["latency_us"], "decision.latency_us"),
        "default_latency_us": (
            None if default_us is None else _us(default_us, "decision.default_latency_us")
        ),
        "runner_up": None if runner_up is None else _config(runner_up, "decision.runner_up"),
        "spread_us": _us(decision["spread_us"], "decision.spread_us"),
        "kept": decision["kept"],
        "note": decision["note"],
    }


def record_decision(
    session: Session,
    *,
    task_id: int,
    worker_id: str,
    environment_id: int,
    retimes: Sequence[Mapping],
    decision: Mapping,
) -> bool:
    """Store a task's re-timed configs and the config it keeps, replacing any earlier ones.

    Only while `worker_id` still holds the task (the check of `db.repo.end_trial`, whose
    clearing of the config in flight it also does), so a worker whose task was taken from it
    writes nothing. A task that is re-timed again (a resumed task) replaces its retimes and its
    decision: afterwards it has exactly these.

    Args:
        session: the open session; everything is written in its transaction.
        task_id: the task.
        worker_id: the worker that claimed it.
        environment_id: from `get_or_create_environment`, the environment of the re-timing.
        retimes: one mapping per re-timed config: `config` (vLLM's six keys), `is_default`
            (bool), `rounds` (interleaved rounds, >= 1), `latency_us` (median), `p20_us`,
            `p80_us` (microseconds, p20 <= median <= p80). Configs distinct, at most one default.
        decision: `config` (vLLM's six keys, one of the re-timed configs), `latency_us` and
            `default_latency_us` (re-timed medians in microseconds; the latter None when the
            default was not re-timed), `runner_up` (vLLM's six keys or None), `spread_us` (the
            noise the winner had to beat, microseconds), `kept` ("fastest", "default" or
            "simpler") and `note` (one line).

    Returns:
        True when stored; False (nothing written) when the worker no longer holds the task.

    Raises:
        ValueError: missing or extra keys, a config that is not vLLM's six positive integers,
            a latency that is negative or not finite, no retimes, a repeated config, two default
            configs, or a decided config that was not re-timed.
    """
    if not retimes:
        raise ValueError("retimes: a decision needs at least one re-timed config")
    rows = [_retime_row(item, index) for index, item in enumerate(retimes)]
    configs = [{name: row[name] for name in CONFIG_KEYS} for row in rows]
    if len({tuple(config.values()) for config in configs}) != len(configs):
        raise ValueError("retimes: a config is re-timed twice")
    if sum(row["is_default"] for row in rows) > 1:
        raise ValueError("retimes: more than one config marked is_default")
    decided = _decision_row(decision, configs)
    if not end_trial(session, task_id=task_id, worker_id=worker_id):
        return False
    now = utcnow()
    session.execute(delete(Retime).where(Retime.task_id == task_id))
    session.execute(delete(Decision).where(Decision.task_id == task_id))
    session.execute(
        insert(Retime),
        [
            {**row, "task_id": task_id, "environment_id": environment_id, "created_at": now}
            for row in rows
        ],
    )
    session.execute(
        insert(Decision).values(
            task_id=task_id, environment_id=environment_id, created_at=now, **decided
        )
    )
    return True


def task_decision(session: Session, *, task_id: int) -> DecisionInfo | None:
    """The decision of a task, with its re-timed configs.

    Returns:
        The decision (retimes sorted by latency_us, then as recorded), or None when the task
        has none.
    """
    decision = session.scalars(select(Decision).where(Decision.task_id == task_id)).one_or_none()
    if decision is None:
        return None
    retimes = session.scalars(
        select(Retime)
        .where(Retime.task_id == task_id)
        .order_by(Retime.latency_us, Retime.retime_id)
    ).all()
    return DecisionInfo(
        decision_id=decision.decision_id,
        task_id=decision.task_id,
        environment_id=decision.environment_id,
        config={name: getattr(decision, name) for name in CONFIG_KEYS},
        latency_us=decision.latency_us,
        default_latency_us=decision.default_latency_us,
        runner_up=None if decision.runner_up is None else dict(decision.runner_up),
        spread_us=decision.spread_us,
        kept=decision.kept,
        note=decision.note,
        created_at=decision.created_at,
        retimes=tuple(
            RetimeInfo(
                config={name: getattr(r, name) for name in CONFIG_KEYS},
                is_default=r.is_default,
                rounds=r.rounds,
                latency_us=r.latency_us,
                p20_us=r.p20_us,
                p80_us=r.p80_us,
            )
            for r in retimes
        ),
    )


# A ceiling's name ends in its unit: copy_gbps (GB/s), fp8_mm_tflops (TFLOP/s).
_CEILING_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def record_ceilings(
    session: Session,
    *,
    environment_id: int,
    ceilings: Mapping[str, float],
    details: Mapping[str, str] | None = None,
) -> None:
    """Store ceilings measured on the GPU of one environment (every measurement is kept).

    Args:
        session: the open session.
        environment_id: from `get_or_create_environment`, where the ceilings were measured.
        ceilings: name -> value, the unit in the name's suffix, e.g. {"copy_gbps": 4300.0,
            "fp8_mm_tflops": 1450.0} (GB/s of a large device-to-device copy, TFLOP/s of torch's
            FP8 matrix product).
        details: name -> how it was measured (sizes, repeats), one line each; optional.

    Raises:
        ValueError: a name that is not lowercase snake_case of at most 64 characters, a value
            that is not a finite positive number, or a detail for a name not in `ceilings`.
    """
    details = dict(details or {})
    extra = sorted(set(details) - set(ceilings))
    if extra:
        raise ValueError(f"details for {', '.join(extra)}, which are not in ceilings")
    rows = []
    for name, value in ceilings.items():
        if not isinstance(name, str) or not _CEILING_NAME.fullmatch(name):
            raise ValueError(
                f"ceiling name {name!r} must be lowercase snake_case such as copy_gbps"
            )
        number = _number(value)
        if number is None or number <= 0:
            raise ValueError(f"ceiling {name} must be a finite positive number, got {value!r}")
        rows.append(
            {
                "environment_id": environment_id,
                "name": name,
                "value": number,
                "detail": details.get(name),
                "created_at": utcnow(),
            }
        )
    if rows:
        session.execute(insert(Ceiling), rows)


def device_ceilings(session: Session, *, device_name: str) -> dict[str, float]:
    """The latest measured value of each ceiling over the environments of a device.

    Args:
        session: the open session.
        device_name: vLLM's device key.

    Returns:
        name -> value (unit in the name), sorted by name; {} when none was measured.
    """
    rows = session.execute(
        select(Ceiling.name, Ceiling.value)
        .join(Environment, Ceiling.environment_id == Environment.environment_id)
        .join(Device, Environment.device_id == Device.device_id)
        .where(Device.device_name == device_name)
        .order_by(Ceiling.created_at.desc(), Ceiling.ceiling_id.desc())
    )
    latest: dict[str, float] = {}
    for name, value in rows:
        latest.setdefault(name, value)
    return dict(sorted(latest.items()))
