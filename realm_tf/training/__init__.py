"""Training: the one orbit training loop and the trainers that run on it (MLM, ICT, REALM, ORQA, FiD-KD)."""
