"""The privbandit shuffler service (``python -m services.shuffler``)."""
