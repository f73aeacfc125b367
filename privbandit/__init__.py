"""The privbandit command line: ``simulate``, ``privacy``, ``up`` and ``demo``, the local launcher,
plots and the demo driver. Nothing under ``shared/`` or ``services/`` imports this package."""
