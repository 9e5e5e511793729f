"""Which texts of a corpus contain an answer string, exactly as evaluation.has_answer(mode="normalized")
decides, fast enough for every training question of a corpus: the weak supervision of ORQA's retriever
(its retriever_correct) and of the answer-recall metric, computed once on the host.
"""

import bisect
import collections
from typing import Sequence

import numpy as np

from realm_tf import evaluation


class AnswerIndex:
  """The texts that contain an answer, exactly as evaluation.has_answer(mode="normalized") decides.

  Why not test every text: a scan of SQuAD-open's 15 MB of paragraphs costs ~6 ms per answer, minutes
  for the training questions. Instead the longest whitespace token of the answer is looked up in the
  corpus's vocabulary (a string a tenth the size): a text that contains the normalised answer has a
  token containing that answer token, so the texts listing such a token are a superset, on which the
  substring test then runs (texts normalised once, as has_answer would normalise them on every call).
  """

  def __init__(self, texts: Sequence[str]):
    # has_answer's own normalisation, so that rows() agrees with it exactly.
    normalize = evaluation.normalize_for_search
    self._normalize = normalize
    self._texts = [normalize(t) for t in texts]
    postings = collections.defaultdict(list)
    for row, text in enumerate(self._texts):
      for token in set(text.split(" ")):
        postings[token].append(row)
    vocab = list(postings)
    self._postings = [np.array(postings[t], np.int32) for t in vocab]
    # "\n" never occurs inside a token, so a match never straddles two of them.
    self._vocab_text = "\n".join(vocab)
    self._vocab_starts = list(np.cumsum([0] + [len(t) + 1 for t in vocab[:-1]]).tolist())

  def _candidates(self, token: str) -> np.ndarray:
    found = []
    position = self._vocab_text.find(token)
    while position >= 0:
      index = bisect.bisect_right(self._vocab_starts, position) - 1
      found.append(self._postings[index])
      if index + 1 == len(self._vocab_starts):
        break
      position = self._vocab_text.find(token, self._vocab_starts[index + 1])
    return np.unique(np.concatenate(found)) if found else np.zeros([0], np.int32)

  def rows(self, answers: Sequence[str]) -> np.ndarray:
    """int32, ascending: the rows of the texts that contain one of answers."""
    result = set()
    for answer in answers:
      answer = self._normalize(answer)
      if not answer:
        continue  # has_answer ignores empty answers, which every text would contain
      for row in self._candidates(max(answer.split(" "), key=len)).tolist():
        if answer in self._texts[row]:
          result.add(row)
    return np.array(sorted(result), np.int32)
