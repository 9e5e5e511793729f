"""The numbers of a bin/demo transcript (the summary lines bin/run_demo.py prints): the retriever's recall,
REALM's loss, the indexes trained on, ORQA's exact match, the seconds of each stage and the total.
bench/demo_bench.py and bench/suite_time_bench.py read transcripts with it."""

import json
import re
from typing import Dict

# The summary lines of bin/run_demo.py that carry numbers.
_RECALL = re.compile(r"recall@(\d+) on (\d+) testdata questions .*: ([\d.]+)% \(.*\) -> ([\d.]+)%")
_ORQA = re.compile(r"ORQA on (\d+) test questions .*exact match ([\d.]+), F1 ([\d.]+), retriever "
                   r"recall@1/5/20/100 (\d+) / (\d+) / (\d+) / (\d+)")
_LOSS = re.compile(r"REALM loss: ([\d.]+) at the first step -> ([\d.]+) at step (\d+)")
_INDEXES = re.compile(r"indexes trained on \(steps\): (\[[\d, ]*\])")
_STAGES = re.compile(r"seconds by stage: (.*)")
_TOTAL = re.compile(r"total (\d+) s;")


def parse(transcript: str) -> Dict:
  """The numbers of one demo transcript; a transcript without its summary is an error."""
  result: Dict = {"recall": {}}
  for line in transcript.splitlines():
    if m := _RECALL.search(line):
      result["recall"][f"@{m.group(1)}"] = [float(m.group(3)), float(m.group(4))]
    elif m := _ORQA.search(line):
      result["orqa"] = {
          "exact_match": float(m.group(2)),
          "f1": float(m.group(3)),
          "recall@1/5/20/100": [int(m.group(i)) for i in range(4, 8)]
      }
    elif m := _LOSS.search(line):
      result["realm_loss"] = [float(m.group(1)), float(m.group(2))]
    elif m := _INDEXES.search(line):
      result["indexes_trained_on"] = json.loads(m.group(1))
    elif m := _STAGES.search(line):
      result["stage_seconds"] = {
          name: float(seconds) for name, seconds in re.findall(r"(?:^|, )(.+?) (\d+) s(?=, |$)", m.group(1))
      }
    elif m := _TOTAL.search(line):
      result["total_seconds"] = float(m.group(1))
  missing = [k for k in ("total_seconds", "realm_loss", "indexes_trained_on") if k not in result]
  if missing or not result["recall"]:
    raise ValueError(f"not a finished bin/demo transcript (no {missing or 'recall'} line); its end:\n" +
                     transcript[-1500:])
  return result
