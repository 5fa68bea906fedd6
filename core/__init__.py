"""Shared definitions: config, encoders, tokenisation, corpus IO, index format, search, metrics.

core imports only third-party libraries; indexer, trainer and service import core.
"""
