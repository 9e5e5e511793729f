r"""sentence-transformers' side of bench/refresh_bench.py: `SentenceTransformer.encode()` over a text file.

Runs only inside the optional environment made by bench/setup_hf_env.sh (torch, transformers,
sentence-transformers); realm_tf never imports it, and no test does. bench/refresh_bench.py runs it once
per round, between its own calls, so that a change of load on a shared machine hits both alike. It loads
the model from a local directory (nothing is downloaded), warms up on one batch, then times one encode()
of every text (sentence-transformers sorts the texts by length and batches them; mean pooling and L2
normalisation are all-MiniLM-L6-v2's own modules) and prints one line:

  RESULT {"wall_s": ..., "cpu_s": ..., "num_texts": ..., "threads": ..., "versions": {...}}

  .venv-hf/bin/python bench/st_encode.py --model_dir=DIR --texts_json=T.json [--vectors_npy=V.npy]
"""

import argparse
import json
import os
import platform
import time

import numpy as np
import sentence_transformers
import torch
import transformers


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--model_dir",
                      required=True,
                      help="all-MiniLM-L6-v2 (a sentence-transformers "
                      "directory: modules.json, config.json, model.safetensors, ...).")
  parser.add_argument("--texts_json", required=True, help="A JSON list of strings.")
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--max_seq_length", type=int, default=256)
  parser.add_argument("--vectors_npy", default=None, help="Also save the vectors here (float32).")
  args = parser.parse_args()
  with open(args.texts_json, encoding="utf-8") as f:
    texts = json.load(f)
  torch.set_num_threads(len(os.sched_getaffinity(0)))  # every usable core, as TensorFlow uses
  model = sentence_transformers.SentenceTransformer(args.model_dir, device="cpu")
  model.max_seq_length = args.max_seq_length
  model.encode(texts[:args.batch_size], batch_size=args.batch_size)  # warm-up, not timed
  wall, cpu = time.perf_counter(), time.process_time()
  vectors = model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True)
  wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
  if args.vectors_npy:
    np.save(args.vectors_npy, vectors.astype(np.float32), allow_pickle=False)
  print("RESULT " + json.dumps({
      "wall_s": wall,
      "cpu_s": cpu,
      "num_texts": len(texts),
      "threads": torch.get_num_threads(),
      "versions": {
          "torch": torch.__version__,
          "transformers": transformers.__version__,
          "sentence_transformers": sentence_transformers.__version__,
          "python": platform.python_version()
      }
  }),
        flush=True)


if __name__ == "__main__":
  main()
