"""What the three services share; nothing here knows about a particular service.

- ``web``: error handling (every error as ``ErrorBody``) and request-body limits
- ``errors``: ``ServiceError``, the base of each service's own error type
- ``group_commit``: ``GroupCommitter``, the one group-commit loop
- ``retry``: ``Backoff``, the one retry schedule
- ``sqlite``: opening a database, ``transaction()``, ``savepoint()`` and numbered migrations
- ``cli``: ``python -m services.<name>`` command line, logging and serving
"""
