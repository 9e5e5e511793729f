"""The training methods as Tasks on the one loop (realm_tf/training/loop.py): masked LM, ICT, REALM, ORQA
and FiD-KD."""
