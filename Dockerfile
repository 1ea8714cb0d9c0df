# The HTTP service: serves merged vLLM/SGLang config files, the HTML report and /metrics from a
# store on a volume. It never imports torch or triton, so the image installs the package without
# the `kernel` extra (sweeps run on GPU hosts against the same store).
#
#   docker build -t blockfp8-tuner .
#   docker run -d -p 8000:8000 -v tuner-data:/data -e TUNER_API_TOKEN=... blockfp8-tuner
#
# Store: sqlite:////data/tuner.db (created on first start), or TUNER_DB_URL=postgresql+psycopg://...
# Writes (POST /devices/{device_name}/imports) need TUNER_API_TOKEN; without it they answer 403.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY tuner ./tuner
COPY db ./db
COPY api ./api
COPY shapes ./shapes
RUN pip install ".[postgres]" && rm -rf /app/tuner /app/db /app/api /app/shapes

# The store lives on the volume; the service runs unprivileged.
RUN mkdir /data && chown nobody:nogroup /data
ENV TUNER_DB_URL=sqlite:////data/tuner.db \
    TUNER_SHAPES_DIR=/data/shapes \
    HOME=/data
VOLUME ["/data"]
WORKDIR /data
USER nobody
EXPOSE 8000

# /health does not touch the store; python's urllib avoids installing curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]

# An older store on the volume: docker run --rm -v tuner-data:/data blockfp8-tuner tuner db upgrade
# --create-store: a fresh volume gets an empty store (tuner serve refuses a missing one).
CMD ["tuner", "serve", "--host", "0.0.0.0", "--port", "8000", "--create-store"]
