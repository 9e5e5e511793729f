r"""The Hugging Face PyTorch side of bench/hf_compare_bench.py: the same document tower, timed on CPU.

Runs only inside the optional environment made by bench/setup_hf_env.sh (torch + transformers); realm_tf
never imports it, and no test does. bench/hf_compare_bench.py keeps it running as a subprocess and asks for
one timed call at a time, so that its calls alternate with realm_tf's and a change of load on a shared
machine hits both alike. The protocol is one command per stdin line, one answer per stdout line:

  embedding [THREADS]   -> RESULT {"wall_s": ..., "cpu_s": ..., "threads": ...}  one forward pass of
                           --embed_batch_size documents under torch.inference_mode (the refresher's loop)
  train_step [THREADS]  -> RESULT {"wall_s": ..., "cpu_s": ..., "threads": ..., "loss": ...}  forward +
                           backward + AdamW of --train_batch_size documents in training mode (dropout on)
  matmul [THREADS]      -> RESULT {"wall_s", "cpu_s", "threads", "gflops", "gflops_per_cpu_s"}  torch's
                           fp32 2048^3 matmul (median of 5 after a warm-up), the library's own peak to read
                           the ratios against (realm_tf's side measures TensorFlow's the same way)
THREADS sets torch's intra-op threads for that call (default: every usable core). It matters on a loaded
machine: each parallel region waits for all its threads, and a thread without a free core stalls it for a
scheduler time slice, which on 2 busy cores made 2 threads 20x slower than 1 on the tiny config. After
start-up it prints READY {versions}. It exits at end of input. By hand:

  printf 'embedding\nembedding 1\n' | .venv-hf/bin/python bench/hf_compare.py --config_json="$(cat c.json)"

The model mirrors realm_tf.modeling.embedder.RetrieverEmbedder: transformers.BertModel (with its tanh
pooler) -> Linear(hidden, 128) -> LayerNorm(eps 1e-12), randomly initialised from the given config (speed
does not depend on the weight values, and nothing is downloaded). The training loss is the one realm_tf's
side uses: an in-batch softmax of the embeddings against fixed random query vectors (document i is the
positive of query i); the optimizer is AdamW with decoupled weight decay 0.01 and a global-norm clip of
1.0, as realm_tf's BERT optimizer.
"""

import argparse
import json
import os
import platform
import sys
import time

import torch
import transformers

# realm_tf's BertConfig.hidden_act names -> Hugging Face's ("gelu" is the exact erf form there).
_HF_ACTIVATIONS = {"gelu_exact": "gelu", "gelu_tanh": "gelu_new"}


def hf_config(values):
  """A transformers.BertConfig from realm_tf's BertConfig.to_dict() field names."""
  return transformers.BertConfig(vocab_size=values["vocab_size"],
                                 hidden_size=values["hidden_size"],
                                 num_hidden_layers=values["num_layers"],
                                 num_attention_heads=values["num_attention_heads"],
                                 intermediate_size=values["intermediate_size"],
                                 hidden_act=_HF_ACTIVATIONS[values["hidden_act"]],
                                 max_position_embeddings=values["max_position_embeddings"],
                                 type_vocab_size=values["type_vocab_size"],
                                 hidden_dropout_prob=values["hidden_dropout_prob"],
                                 attention_probs_dropout_prob=values["attention_probs_dropout_prob"],
                                 initializer_range=values["initializer_range"],
                                 layer_norm_eps=1e-12)


class DocTower(torch.nn.Module):
  """BERT pooled output -> Linear(projection_size) -> LayerNorm, as RetrieverEmbedder."""

  def __init__(self, config, projection_size):
    super().__init__()
    self.bert = transformers.BertModel(config, add_pooling_layer=True)
    self.projection = torch.nn.Linear(config.hidden_size, projection_size)
    self.layer_norm = torch.nn.LayerNorm(projection_size, eps=1e-12)

  def forward(self, token_ids, mask, segment_ids):
    pooled = self.bert(input_ids=token_ids, attention_mask=mask, token_type_ids=segment_ids).pooler_output
    return self.layer_norm(self.projection(pooled))


def _inputs(batch_size, seq_len, generator):
  # Token ids in the range realm_tf's side uses; all positions real (no padding), as there.
  token_ids = torch.randint(1000, 30000, (batch_size, seq_len), generator=generator)
  return token_ids, torch.ones_like(token_ids), torch.zeros_like(token_ids)


class Bench:
  """The two timed calls, each on fixed inputs built once."""

  def __init__(self, model, embed_batch_size, train_batch_size, seq_len, projection_size):
    self.model = model
    generator = torch.Generator().manual_seed(0)
    self.embed_inputs = _inputs(embed_batch_size, seq_len, generator)
    self.train_inputs = _inputs(train_batch_size, seq_len, generator)
    self.queries = torch.randn(train_batch_size, projection_size, generator=generator)
    self.labels = torch.arange(train_batch_size)
    self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)

  def embedding(self):
    self.model.eval()
    with torch.inference_mode():
      self.model(*self.embed_inputs)
    return {}

  def train_step(self):
    self.model.train()
    self.optimizer.zero_grad(set_to_none=True)
    scores = self.queries @ self.model(*self.train_inputs).T
    loss = torch.nn.functional.cross_entropy(scores, self.labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
    self.optimizer.step()
    return {"loss": loss.item()}

  def matmul(self, size=2048, repeats=5):
    a = torch.randn(size, size)
    torch.mm(a, a)
    walls, cpus = [], []
    for _ in range(repeats):
      wall, cpu = time.perf_counter(), time.process_time()
      torch.mm(a, a)
      walls.append(time.perf_counter() - wall)
      cpus.append(time.process_time() - cpu)
    gflop = 2 * size**3 / 1e9
    return {
        "gflops": gflop / sorted(walls)[repeats // 2],
        "gflops_per_cpu_s": gflop / sorted(cpus)[repeats // 2]
    }


def _answer(tag, value):
  print(f"{tag} {json.dumps(value)}", flush=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--config_json", required=True, help="realm_tf BertConfig.to_dict() as JSON.")
  parser.add_argument("--seq_len", type=int, default=288)
  parser.add_argument("--embed_batch_size", type=int, default=64)
  parser.add_argument("--train_batch_size", type=int, default=8)
  parser.add_argument("--projection_size", type=int, default=128)
  args = parser.parse_args()

  torch.manual_seed(0)
  default_threads = len(os.sched_getaffinity(0))  # every usable core, as TensorFlow uses
  model = DocTower(hf_config(json.loads(args.config_json)), args.projection_size)
  bench = Bench(model, args.embed_batch_size, args.train_batch_size, args.seq_len, args.projection_size)
  calls = {"embedding": bench.embedding, "train_step": bench.train_step, "matmul": bench.matmul}
  _answer(
      "READY",
      {
          "torch": torch.__version__,
          "transformers": transformers.__version__,
          "python": platform.python_version(),
          "default_threads": default_threads,
          # pylint: disable-next=protected-access
          "attention_implementation": model.bert.config._attn_implementation
      })
  for line in sys.stdin:  # one line at a time as the driver writes it (Python 3 does not read ahead)
    words = line.split()
    if not words or words[0] not in calls or len(words) > 2 or not all(w.isdigit() for w in words[1:]):
      _answer("ERROR", {"bad_command": line.strip(), "known": sorted(calls), "usage": "COMMAND [THREADS]"})
      continue
    threads = int(words[1]) if len(words) == 2 else default_threads
    torch.set_num_threads(threads)
    wall, cpu = time.perf_counter(), time.process_time()
    extra = calls[words[0]]()
    _answer("RESULT",
            dict(extra, wall_s=time.perf_counter() - wall, cpu_s=time.process_time() - cpu, threads=threads))


if __name__ == "__main__":
  main()
