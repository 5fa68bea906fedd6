"""Shared definitions: config, encoders, tokenisation, corpus IO, index format, search, metrics.

core imports only third-party libraries; indexer, trainer and service import core.
"""

if __name__ != "spanseek.core":  # one import root: never a top-level `core` that shadows users' own modules
    raise ImportError(f"this is spanseek.core; import it as `spanseek.core`, not as `{__name__}`")
