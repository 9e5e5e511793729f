"""int8 re-scoring vectors: a compressed index's document vectors at a quarter of float32's bytes."""

import dataclasses
from typing import Tuple

import numpy as np


@dataclasses.dataclass(frozen=True)
class Int8Embeddings:
  """Embeddings kept as int8 codes with one float32 scale per dimension: row r is codes[r] * scales.

  The compressed index's re-scoring vectors, as plain arrays that dequantize on demand for what reads
  `MipsIndex.embeddings` (ORQA's in-graph scoring, the exports, index updates). A ScaNN index takes
  them from ScaNN's own int8 reordering (`from_multipliers`; its codes are chosen to keep inner
  products, "noise shaping"); format 1 indexes stored their own, rounded per dimension.
  """
  codes: np.ndarray  # int8 [num_docs, dim]
  scales: np.ndarray  # float32 [dim]

  @classmethod
  def from_multipliers(cls, codes: np.ndarray, multipliers: np.ndarray) -> "Int8Embeddings":
    """ScaNN's fixed-point form: row r is codes[r] / multipliers."""
    multipliers = np.asarray(multipliers, np.float32)
    scales = np.ones_like(multipliers)
    np.divide(1.0, multipliers, out=scales, where=multipliers != 0)  # a zero dimension: codes are 0
    return cls(codes, scales)

  @property
  def shape(self) -> Tuple[int, int]:
    return self.codes.shape

  def rows(self, rows: np.ndarray) -> np.ndarray:
    """float32 [..., dim] of the dequantized rows."""
    return self.codes[rows].astype(np.float32) * self.scales

  def dequantized(self) -> np.ndarray:
    out = np.empty(self.codes.shape, np.float32)
    for start in range(0, self.codes.shape[0], 65536):
      out[start:start + 65536] = self.codes[start:start + 65536].astype(np.float32) * self.scales
    out.flags.writeable = False
    return out
