"""Offline indexing: encode a corpus into token vectors and build the faiss phrase index (see indexer.build)."""
