"""What the three services share; nothing here knows about a particular service.

- ``web``: error handling (every error as ``ErrorBody``) and request-body limits
- ``errors``: ``ServiceError``, the base of each service's own error type
- ``group_commit``: ``GroupCommitter``, the one group-commit loop
- ``retry``: ``Jittered``, the one retry schedule, and the tenacity loops that run it
- ``sqlite``: opening a database, ``transaction()``, ``savepoint()`` and numbered migrations
- ``pg``: PostgreSQL connections and pools, migrations, and ``Database.run_tx``, the one
  transaction runner (retries, ``TxMetrics``)
- ``migrations``: the stores' released migration scripts (``<store>/migrations/*.sql``)
- ``cli``: ``python -m services.<name>`` command line, logging and serving (``run_service``)
- ``app``: ``build_app``, how a service's FastAPI app is put together (lifespan, limits, errors)
- ``deps``: the ``get_runtime`` and task-lookup dependencies behind each service's typed aliases
- ``health``: ``Readiness`` and the ``/healthz`` answer (503 ``starting`` until ready)
- ``metrics``: ``ServiceMetrics``, a per-app Prometheus registry and the ``/metrics`` answer
"""
