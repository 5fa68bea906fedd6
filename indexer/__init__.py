"""Offline indexing: encode a corpus into token vectors and build the faiss phrase index (see indexer.build)."""

if __name__ != "spanseek.indexer":  # one import root: never a top-level `indexer` that shadows users' own modules
    raise ImportError(f"this is spanseek.indexer; import it as `spanseek.indexer`, not as `{__name__}`")
