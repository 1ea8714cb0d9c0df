# The HTTP service only: serves merged vLLM config files from a store on a volume.
# It never imports torch or triton, so the image installs the package without the `kernel` extra.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tuner ./tuner
COPY db ./db
COPY api ./api
COPY shapes ./shapes
RUN pip install --no-cache-dir ".[postgres]"
RUN mkdir /data && chown nobody /data
ENV TUNER_DB_URL=sqlite:////data/tuner.db
VOLUME ["/data"]
EXPOSE 8000
USER nobody
CMD ["tuner", "serve", "--host", "0.0.0.0", "--port", "8000"]
