r"""Answers questions with an exported open-QA SavedModel and shows the passages it read.

  python bin/answer.py "Where was Savix Lunene born?" --saved_model=/export/orqa/open_qa
Several questions may follow each other; each prints its answer, the answer's score and the retrieved
passages (best first) with their retriever scores; the last line names the model's retriever (dense,
bm25 or hybrid: bin/export_saved_model --retriever).
"""

from realm_tf import process_start

process_start.pause_collector(__name__)  # before TensorFlow's import (realm_tf/process_start.py)
# pylint: disable=wrong-import-position

import textwrap

from absl import app
from absl import flags

from realm_tf.export import loader

_SAVED_MODEL = flags.DEFINE_string("saved_model",
                                   None, "An open_qa SavedModel directory "
                                   "(bin/export_saved_model's OUTPUT_DIR/open_qa).",
                                   required=True)
_PASSAGES = flags.DEFINE_integer("num_passages", 5, "Passages shown per question.")
_CHARS = flags.DEFINE_integer("max_passage_chars", 240, "Passage text shown per passage.")


def _text(value) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def main(argv):
  questions = argv[1:]
  if not questions:
    raise app.UsageError('pass the question(s) after the flags: bin/answer.py "who wrote the iliad" '
                         "--saved_model=DIR")
  try:
    model = loader.load_open_qa(_SAVED_MODEL.value)
  except ValueError as e:
    raise app.UsageError(f"--saved_model: {e}") from e
  outputs = loader.answer_questions(model, questions)
  for i, question in enumerate(questions):
    print(f"Q: {question}")
    print(f"A: {_text(outputs['answers'][i])}    (score {outputs['scores'][i]:.3f})")
    for rank in range(min(_PASSAGES.value, outputs["block_ids"].shape[1])):
      passage = " ".join(_text(outputs["block_texts"][i][rank]).split())
      print(f"  {rank + 1}. [{_text(outputs['doc_ids'][i][rank])}] "
            f"{_text(outputs['block_titles'][i][rank])} "
            f"(retriever {outputs['retriever_scores'][i][rank]:.3f})")
      print(textwrap.indent(
          textwrap.shorten(passage, _CHARS.value, placeholder=" ...") or "(empty)", "     "))
    print()
  # Which passages a model reads depends on its retriever (bin/export_saved_model --retriever); last, so
  # each question's lines start the output as before.
  print(f"passages retrieved by {loader.describe_retriever(loader.export_info(_SAVED_MODEL.value))}")


if __name__ == "__main__":
  app.run(main)
