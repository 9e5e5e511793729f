"""bin/serve's page: the answer marked at its bytes in the passage that holds it (multi-byte text
included), everything escaped, and exports without the answer's span shown unmarked."""

from absl.testing import absltest

from realm_tf.serving import page

_TEXT = "Zoë <b>Kelarlé</b> was born in Ulakfen.".encode("utf-8")


def _row(**extra):
  row = {
      "answers": b"Ulakfen",
      "scores": 2.5,
      "block_ids": [7, 4],
      "doc_ids": [b"p-7", b"p-4"],
      "block_titles": [b"Other", "Zoë".encode("utf-8")],
      "block_texts": [b"Nothing here.", _TEXT],
      "retriever_scores": [3.0, 1.25]
  }
  row.update(extra)
  return row


class PageTest(absltest.TestCase):

  def test_answer_marked_in_its_passage(self):
    start = _TEXT.index(b"Ulakfen")
    html = page.render("open_qa",
                       "Where was <Zoë> born?",
                       _row(answer_block_ids=4,
                            answer_byte_starts=start,
                            answer_byte_limits=start + len(b"Ulakfen")),
                       seconds=0.0123)
    self.assertIn('value="Where was &lt;Zoë&gt; born?"', html)
    self.assertIn('<div class="text" id="answer-text">Ulakfen</div>', html)
    self.assertIn("12 ms", html)
    self.assertIn("Zoë &lt;b&gt;Kelarlé&lt;/b&gt; was born in <mark>Ulakfen</mark>.", html)
    self.assertEqual(html.count("<mark>"), 1)
    self.assertIn('<li class="holds-answer">', html)
    self.assertIn("[p-4] retriever score 1.250", html)
    self.assertLess(html.index("Other"), html.index("Kelarlé"))  # the retriever's order
    self.assertNotIn("http", html.replace('lang="en"', ""))  # nothing fetched from elsewhere

  def test_no_span_no_mark(self):
    for row in (_row(), _row(answer_block_ids=4, answer_byte_starts=-1,
                             answer_byte_limits=-1), _row(answers=b"")):
      html = page.render("open_qa", "q", row)
      self.assertNotIn("<mark>", html)
    self.assertIn("(no answer)", page.render("open_qa", "q", _row(answers=b"")))

  def test_shows_answer_reads_the_rendered_answer(self):
    shown = page.render("open_qa", "q", _row(answers="a <b> & c".encode("utf-8")))
    self.assertTrue(page.shows_answer(shown, "a <b> & c"))
    self.assertFalse(page.shows_answer(shown, "a <b>"))
    self.assertFalse(page.shows_answer(shown, ""))
    self.assertTrue(page.shows_answer(page.render("open_qa", "q", _row(answers=b"")), ""))

  def test_error_and_empty_form(self):
    html = page.render("m", "", error="the question is an <empty> question")
    self.assertIn('id="error">the question is an &lt;empty&gt; question<', html)
    self.assertNotIn('id="answer"', html)
    self.assertNotIn('id="error"', page.render("m"))
    self.assertEqual(page.render("m", "q", _row(), num_passages=1).count("<li"), 1)


if __name__ == "__main__":
  absltest.main()
