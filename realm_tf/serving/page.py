"""bin/serve's HTML page: a question box, the answer, the passages read (title, retriever score, the answer
marked in its passage) and the time the answer took.

Rendered on the server from the open-QA signature's outputs (one question's row), so the page works
without JavaScript; its CSS is inline and nothing is fetched from the network.
"""

import html
from typing import Any, Mapping, Optional
from urllib import parse

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 52rem; margin: 2rem auto;
       padding: 0 1rem; color: #1d1d1f; background: #fafafa; }
h1 { font-size: 1.4rem; margin-bottom: 0.2rem; }
.sub { color: #666; margin-top: 0; }
form { display: flex; gap: 0.5rem; margin: 1.2rem 0; }
input[type=text] { flex: 1; font-size: 1.05rem; padding: 0.5rem 0.7rem; border: 1px solid #bbb;
                   border-radius: 6px; }
button { font-size: 1.05rem; padding: 0.5rem 1.1rem; border: 0; border-radius: 6px; background: #1a5fb4;
         color: white; cursor: pointer; }
.answer { background: white; border: 1px solid #ddd; border-radius: 8px; padding: 0.8rem 1rem; }
.answer .text { font-size: 1.4rem; font-weight: 600; }
.meta { color: #666; font-size: 0.9rem; }
.error { background: #fdecea; border: 1px solid #f5c2c0; border-radius: 8px; padding: 0.8rem 1rem; }
ol.passages { padding-left: 1.4rem; }
ol.passages li { background: white; border: 1px solid #e3e3e3; border-radius: 8px; padding: 0.6rem 0.9rem;
                 margin: 0.6rem 0; }
ol.passages li.holds-answer { border-color: #e0b400; }
.title { font-weight: 600; }
mark { background: #ffe066; padding: 0 0.1rem; border-radius: 3px; }
footer { color: #888; font-size: 0.85rem; margin-top: 2rem; }
code { background: #eee; padding: 0 0.25rem; border-radius: 3px; }
"""


def _text(value: Any) -> str:
  return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _passage_html(text: bytes, start: int, limit: int) -> str:
  """The passage, escaped, with bytes [start, limit) in <mark> (none when start < 0)."""
  if start < 0 or limit < start or limit > len(text):
    return html.escape(_text(text))
  return (html.escape(_text(text[:start])) + "<mark>" + html.escape(_text(text[start:limit])) + "</mark>" +
          html.escape(_text(text[limit:])))


def _answer_html(answer: str) -> str:
  return f'<div class="text" id="answer-text">{html.escape(answer) if answer else "(no answer)"}</div>'


def shows_answer(page_html: str, answer: str) -> bool:
  """Whether a page render() made shows answer as its answer: what a client of bin/serve's page checks,
  read here so that it follows the page's markup."""
  return _answer_html(answer) in page_html


def _result_html(row: Mapping[str, Any], seconds: float, num_passages: int) -> str:
  """One question's outputs (row i of every output of the open-QA signature) as the answer and passages."""
  answer = _text(row["answers"])
  parts = [
      '<section class="answer" id="answer">',
      _answer_html(answer), f'<div class="meta">reader score {float(row["scores"]):.3f} &middot; answered in '
      f'<span id="answer-time">{seconds * 1000:.0f} ms</span></div>', "</section>"
  ]
  # Exports from before the answer's span was an output have no answer_* outputs: no marking then.
  answer_row = int(row["answer_block_ids"]) if "answer_block_ids" in row else None
  start = int(row.get("answer_byte_starts", -1))
  limit = int(row.get("answer_byte_limits", -1))
  parts.append('<h2>Passages read</h2><ol class="passages">')
  for rank in range(min(num_passages, len(row["block_ids"]))):
    holds = answer_row is not None and int(row["block_ids"][rank]) == answer_row and start >= 0
    text = row["block_texts"][rank]
    text = text if isinstance(text, bytes) else str(text).encode("utf-8")
    body = _passage_html(text, start, limit) if holds else html.escape(_text(text))
    css = ' class="holds-answer"' if holds else ""
    parts.append(
        f'<li{css}><div><span class="title">'
        f'{html.escape(_text(row["block_titles"][rank]))}</span> <span class="meta">'
        f'[{html.escape(_text(row["doc_ids"][rank]))}] retriever score '
        f'{float(row["retriever_scores"][rank]):.3f}</span></div><div class="body">{body}</div></li>')
  parts.append("</ol>")
  return "\n".join(parts)


def render(model_name: str,
           question: str = "",
           row: Optional[Mapping[str, Any]] = None,
           seconds: float = 0.0,
           error: Optional[str] = None,
           num_passages: int = 5,
           retriever: Optional[str] = None) -> str:
  """The whole page: the form (holding question), then the error, or the answer of row, if any;
  retriever (loader.describe_retriever) is named under the title."""
  body = []
  if error:
    body.append(f'<section class="error" id="error">{html.escape(error)}</section>')
  elif row is not None:
    body.append(_result_html(row, seconds, num_passages))
  api = f"/v1/models/{parse.quote(model_name)}"
  retrieved_by = (f' Retriever: <span id="retriever">{html.escape(retriever)}</span>.' if retriever else "")
  return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>realm_tf open-domain QA</title>
<style>{_STYLE}</style></head>
<body>
<h1>Ask a question</h1>
<p class="sub">realm_tf open-domain QA: the model retrieves passages from its corpus and reads the answer
from them.{retrieved_by}</p>
<form method="get" action="/">
<input type="text" name="q" id="question" value="{html.escape(question)}" autofocus
 placeholder="Where was Savix Lunene born?" aria-label="question">
<button type="submit" id="ask">Ask</button>
</form>
{"".join(body)}
<footer>Model <code>{html.escape(model_name)}</code>. JSON API (TF Serving's REST format):
<code>POST {html.escape(api)}:predict</code> with <code>{{"instances": ["a question"]}}</code>;
status at <code>GET {html.escape(api)}</code>.</footer>
</body></html>
"""
