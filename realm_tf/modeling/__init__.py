"""Models: BERT encoders, the retriever towers, the knowledge-augmented encoder, REALM, ORQA, the FiD reader and their losses."""
