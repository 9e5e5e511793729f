"""Conversion jobs: Google's released REALM/ORQA checkpoints and block_emb into realm_tf checkpoints and indexes."""
