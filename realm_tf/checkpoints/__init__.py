"""Reading weights: checkpoint and safetensors sources, the BERT variable mapping, Google's released REALM/ORQA layouts, training-run checkpoint state."""
