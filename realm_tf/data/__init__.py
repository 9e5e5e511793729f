"""Input data: corpora and their shards, QA and pre-training examples, masking, featurization of ORQA and FiD inputs."""
