# One image for every process of tasks-backend; the compose file picks the command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY tasks_backend ./tasks_backend
COPY adapters ./adapters
COPY workers ./workers
# /etc/tasks-backend: where compose mounts the `tokens` volume (a new volume takes this owner).
RUN pip install . && useradd --system --uid 10001 --no-create-home app \
    && mkdir -p /etc/tasks-backend && chown app /etc/tasks-backend

USER app
EXPOSE 8000 5555
CMD ["tasks-backend", "web"]
