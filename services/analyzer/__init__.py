"""The privbandit analyzer service (``python -m services.analyzer``)."""
