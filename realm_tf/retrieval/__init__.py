"""Retrieval: corpus embedding, MIPS indexes (ScaNN, brute force), BM25, index publication, refresh and incremental update."""
