"""SQuAD-open: the SQuAD v1.1 dev questions answered against a paragraph corpus, no gold paragraph given.

The corpus is every paragraph of train and dev (20,963), numbered as the squad-v1.1-paragraphs.tsv that
bin/download_data.py derives numbers them: train 1..18,896 in file order, then dev. The questions are the
10,570 dev questions, each with its gold paragraph's doc_id. The dev articles do not occur in train, so
a dev question's answer-bearing paragraphs are (nearly always) dev paragraphs; the dev-only corpus
(2,067 paragraphs) is the easier setting some papers report beside the full one.

Recall is reported two ways (realm_tf.evaluation.rankings_recall with SquadOpen.recall_inputs()):
"answer string in top-k" (has_answer, lower-cased and whitespace-normalised: DPR-style, which finds
"paris" in "Paris") and "gold paragraph in top-k". The answer is looked for in the paragraph body only:
the title is not part of SQuAD's context.
"""

import dataclasses
import os
from typing import Dict, List, Tuple

import numpy as np
import tensorflow as tf

from realm_tf.data import corpus as corpus_lib
from realm_tf.data import qa

# Each split's file names, looked for in this order: the official ones (what bin/download_data.py
# fetches), then the `.rebuilt` copies of a local mirror (the same paragraphs and questions).
TRAIN_FILES = ("train-v1.1.json", "train-v1.1.rebuilt.json")
DEV_FILES = ("dev-v1.1.json", "dev-v1.1.rebuilt.json")
PARAGRAPHS_FILE = "squad-v1.1-paragraphs.tsv"


def find_squad_files(directory: str) -> Tuple[str, str]:
  """(train, dev): the paths of SQuAD v1.1's two files in directory, each under its first name in
  TRAIN_FILES / DEV_FILES that exists. Raises FileNotFoundError naming the directory and the
  names."""
  found, missing = [], []
  for names in (TRAIN_FILES, DEV_FILES):
    paths = [p for p in (os.path.join(directory, n) for n in names) if tf.io.gfile.exists(p)]
    if paths:
      found.append(paths[0])
    else:
      missing.append(" or ".join(names))
  if missing:
    raise FileNotFoundError(f"{directory}: no {' and no '.join(missing)}; fetch SQuAD v1.1 with "
                            "`python bin/download_data.py --datasets=squad --data_dir=DIR`, which "
                            "writes DIR/squad")
  return found[0], found[1]


@dataclasses.dataclass
class SquadOpen:
  """A corpus and the dev questions (metadata["doc_id"] names each question's gold paragraph).

  documents: the corpus, in doc_id order; num_train_paragraphs: how many of them (the first) are train
  paragraphs (0 in the dev-only corpus).
  """
  documents: List[corpus_lib.Document]
  questions: List[qa.QAExample]
  num_train_paragraphs: int

  def dev_corpus(self) -> "SquadOpen":
    """The same questions against the dev paragraphs alone (rows shift down by num_train_paragraphs)."""
    return SquadOpen(self.documents[self.num_train_paragraphs:], self.questions, 0)

  def recall_inputs(self) -> Dict:
    """Keyword arguments of realm_tf.evaluation.rankings_recall for rankings of this corpus's rows:
    answers searched in the bodies, normalised (SQuAD-open's convention), and the gold rows."""
    return {
        "texts": [d.body for d in self.documents],
        "answers": [q.answers for q in self.questions],
        "gold_rows": self.gold_rows(),
        "mode": "normalized"
    }

  def gold_rows(self) -> np.ndarray:
    """int64 [num_questions]: the row of each question's gold paragraph in documents (-1 if absent)."""
    row_of = {d.doc_id: i for i, d in enumerate(self.documents)}
    return np.array([row_of.get(q.metadata["doc_id"], -1) for q in self.questions], np.int64)


def load_squad_open(train_path: str, dev_path: str) -> SquadOpen:
  """The SQuAD-open corpus (train then dev paragraphs) and the dev questions; see dev_corpus()."""
  train = qa.load_squad_paragraphs(train_path, first_paragraph_id=1)
  first_dev_id = 1 + len(train)
  dev = qa.load_squad_paragraphs(dev_path, first_paragraph_id=first_dev_id)
  questions = qa.load_squad(dev_path, first_paragraph_id=first_dev_id)
  shared = sorted({d.title for d in dev} & {d.title for d in train})
  if shared:
    # The held-out-articles setting (and the published numbers) assume disjoint articles.
    raise qa.InputError(f"{dev_path}: {len(shared)} articles also occur in {train_path} (e.g. "
                        f"{shared[0]!r}); SQuAD-open expects the dev articles held out of train")
  return SquadOpen(documents=train + dev, questions=questions, num_train_paragraphs=len(train))
