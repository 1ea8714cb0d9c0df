"""Settings of the HTTP service, read from `TUNER_*` environment variables."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.exc import ArgumentError

from db.repo import default_db_url, masked


class Settings(BaseSettings):
    """What the service needs to know; each field is read from `TUNER_<FIELD>`.

    Attributes:
        db_url: The store's SQLAlchemy URL (`TUNER_DB_URL`, else `sqlite:///tuner.db`).
        host: Address `tuner serve` binds to.
        port: Port `tuner serve` binds to.
        allow_partial: Serve files of shapes whose M grid is not finished yet, by default.
        api_token: Bearer token that write endpoints require, without surrounding whitespace;
            with none set, or a blank one, write endpoints are refused.
        max_body_bytes: The largest request body accepted; a larger one is a 413, refused from
            its `Content-Length` or once that many bytes arrived. 4 MiB: an import's `content`
            may hold 1 MiB of text, which JSON escaping can double.
    """

    model_config = SettingsConfigDict(env_prefix="TUNER_", extra="ignore")

    db_url: str = Field(default_factory=default_db_url)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    allow_partial: bool = False
    api_token: SecretStr | None = None
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1)

    @field_validator("api_token")
    @classmethod
    def _api_token(cls, value: SecretStr | None) -> SecretStr | None:
        # `TUNER_API_TOKEN=` must not open the write routes to `Authorization: Bearer `.
        token = None if value is None else value.get_secret_value().strip()
        return SecretStr(token) if token else None

    @property
    def too_large(self) -> str:
        """The `detail` of a 413."""
        return f"request body over {self.max_body_bytes} bytes (the service's TUNER_MAX_BODY_BYTES)"

    def masked_db_url(self) -> str:
        """The store URL with any password shown as `***`, or `<invalid URL>` if it won't parse."""
        try:
            return masked(self.db_url)
        except (ArgumentError, ValueError):
            return "<invalid URL>"
