"""spanseek: dense phrase retrieval as a search service (the `spanseek` command lives in spanseek.cli)."""

__version__ = "0.1.0"
