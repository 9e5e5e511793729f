"""Tests of the synthetic testdata generator and of the committed testdata/ it wrote."""

import filecmp
import json
import os

import tensorflow as tf

from realm_tf import tokenization
from realm_tf.data import corpus
from realm_tf.data import synthetic

_TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata")


class SyntheticTest(tf.test.TestCase):

  def test_regenerates_committed_testdata_byte_for_byte(self):
    out = self.create_tempdir().full_path
    counts = synthetic.write_testdata(out)
    self.assertEqual(
        set(counts), {
            "vocab.txt", "corpus.jsonl", "pretraining.jsonl", "qa.train.jsonl", "qa.dev.jsonl",
            "qa.test.jsonl", "bert_pretraining.jsonl"
        })
    for name in counts:
      self.assertTrue(filecmp.cmp(os.path.join(out, name), os.path.join(_TESTDATA, name), shallow=False),
                      f"{name} differs from testdata/{name}")

  def test_bert_pretraining_text_shares_the_language_not_the_facts(self):
    corpus_docs = synthetic.load_jsonl(os.path.join(_TESTDATA, "corpus.jsonl"))
    other = synthetic.load_jsonl(os.path.join(_TESTDATA, "bert_pretraining.jsonl"))
    self.assertLen(other, len(corpus_docs))
    answers = {
        a for split in ("train", "dev", "test")
        for q in synthetic.load_jsonl(os.path.join(_TESTDATA, f"qa.{split}.jsonl")) for a in q["answer"]
    }
    text = " ".join(d["text"] for d in other)
    # Dates, guilds, works and towns are drawn anew: almost no answer of this corpus occurs there.
    self.assertLess(sum(answer in text for answer in answers), 0.05 * len(answers))
    tokenizer = tokenization.Tokenizer(os.path.join(_TESTDATA, "vocab.txt"))
    ids = [i for t in tokenizer.tokenize_texts([d["text"] for d in other]) for i in t.ids]
    self.assertNotIn(tokenizer.unk_id, ids)  # the same vocabulary covers it

  def test_bert_pretraining_articles_open_with_a_lead_that_restates_their_facts(self):
    # The BERT learns to copy a fact from elsewhere in its input only if the text states facts twice.
    for doc in synthetic.load_jsonl(os.path.join(_TESTDATA, "bert_pretraining.jsonl")):
      lead, rest = doc["text"].split(". ", 1)
      names = [w.strip(",") for w in lead.split()[1:] if w[:1].isupper()]
      names = [n for n in names if n not in doc["title"].split()]
      self.assertGreaterEqual(len(names), 2, doc["text"])
      for name in names:
        self.assertIn(name, rest, f"{doc['title']}: the lead's {name!r} is not in the article")

  def test_all_news_items_extend_the_pretraining_news_with_the_asked_subjects(self):
    news = synthetic.all_news_items()
    self.assertLen(news, 300)
    pretraining = [
        r for r in synthetic.load_jsonl(os.path.join(_TESTDATA, "pretraining.jsonl"))
        if r["title"] == synthetic.NEWS_TITLE
    ]
    asked = {
        q["doc_id"]
        for split in ("dev", "test")
        for q in synthetic.load_jsonl(os.path.join(_TESTDATA, f"qa.{split}.jsonl"))
    }
    self.assertEqual([{
        k: v for k, v in r.items() if k != "doc_id"
    } for r in news if r["doc_id"] not in asked], pretraining)
    self.assertTrue(asked <= {r["doc_id"] for r in news})

  def test_another_seed_gives_another_world(self):
    a = synthetic.generate(seed=1, num_people=10, num_villages=5)
    b = synthetic.generate(seed=2, num_people=10, num_villages=5)
    self.assertNotEqual(a["corpus.jsonl"], b["corpus.jsonl"])
    self.assertEqual(a, synthetic.generate(seed=1, num_people=10, num_villages=5))

  def test_each_answer_lies_in_exactly_its_document(self):
    docs = synthetic.load_jsonl(os.path.join(_TESTDATA, "corpus.jsonl"))
    self.assertLen(docs, 300)
    by_id = {d["id"]: d for d in docs}
    questions = []
    for split in ("train", "dev", "test"):
      questions += synthetic.load_jsonl(os.path.join(_TESTDATA, f"qa.{split}.jsonl"))
    self.assertGreaterEqual(len(questions), 900)
    for qa in questions:
      answer = qa["answer"][0]
      holders = [d["id"] for d in docs if answer in d["body"] or answer in d["title"]]
      self.assertEqual(holders, [qa["doc_id"]], qa)
      self.assertEqual(by_id[qa["doc_id"]]["title"], qa["title"])
    dev_questions = {q["question"] for q in synthetic.load_jsonl(os.path.join(_TESTDATA, "qa.dev.jsonl"))}
    train_questions = {q["question"] for q in synthetic.load_jsonl(os.path.join(_TESTDATA, "qa.train.jsonl"))}
    self.assertEmpty(dev_questions & train_questions)

  def test_pretraining_offsets_are_sentences_and_salient_spans(self):
    corpus_docs = synthetic.load_jsonl(os.path.join(_TESTDATA, "corpus.jsonl"))
    records = synthetic.load_jsonl(os.path.join(_TESTDATA, "pretraining.jsonl"))
    self.assertGreater(len(records), len(corpus_docs))  # the articles, then the news items
    for record, doc in zip(records, corpus_docs):
      # The same bytes as the retrieval corpus, so the pre-training pipeline can exclude the
      # sentence's own document by uid.
      self.assertEqual(corpus.document_uid(record["title"], record["text"]),
                       corpus.document_uid(doc["title"], doc["body"]))
      text = record["text"].encode("utf-8")
      sentences = record["sentences"]
      self.assertEqual(sentences[0][0], 0)
      self.assertEqual(sentences[-1][1], len(text))
      for start, limit in sentences:
        self.assertTrue(text[start:limit].endswith(b"."))
      for start, limit in record["spans"]:
        self.assertTrue(any(s <= start and limit <= e for s, e in sentences))
        span = text[start:limit].decode("utf-8")
        self.assertEqual(span.strip(), span)
        self.assertTrue(span[0].isupper() or span[0].isdigit(), span)

  def test_news_items_state_facts_of_one_article_whose_subject_no_dev_or_test_question_asks(self):
    corpus_docs = synthetic.load_jsonl(os.path.join(_TESTDATA, "corpus.jsonl"))
    news = synthetic.load_jsonl(os.path.join(_TESTDATA, "pretraining.jsonl"))[len(corpus_docs):]
    asked = {
        q["doc_id"]
        for split in ("dev", "test")
        for q in synthetic.load_jsonl(os.path.join(_TESTDATA, f"qa.{split}.jsonl"))
    }
    unasked = [d for d in corpus_docs if d["id"] not in asked]
    self.assertGreater(len(unasked), 100)
    self.assertLen(news, len(unasked))  # one news item per subject no dev/test question asks about
    bodies = [d["body"] for d in corpus_docs]
    for record, doc in zip(news, unasked):
      text = record["text"].encode("utf-8")
      self.assertEqual(record["title"], "Gazette")
      self.assertLen(record["spans"], len(record["sentences"]))  # one fact per sentence
      for (start, limit), (s_start, s_limit) in zip(record["spans"], record["sentences"]):
        fact = text[start:limit].decode("utf-8")
        sentence = text[s_start:s_limit].decode("utf-8")
        self.assertTrue(sentence.startswith(doc["title"]), (sentence, doc["title"]))
        # Only the subject's article holds the fact: retrieving it by the name completes the sentence,
        # and no other article of the same kind does.
        self.assertEqual([d["id"] for d in corpus_docs if fact in d["body"]], [doc["id"]])
      # Not a copy of any article, so it is never excluded as a query's own document.
      self.assertNotIn(record["text"], bodies)

  def test_vocab_covers_the_corpus_and_splits_names(self):
    tokenizer = tokenization.Tokenizer(os.path.join(_TESTDATA, "vocab.txt"))
    docs = synthetic.load_jsonl(os.path.join(_TESTDATA, "corpus.jsonl"))
    tokenized = tokenizer.tokenize_texts([d["title"] + " " + d["body"] for d in docs])
    self.assertNotIn(tokenizer.unk_id, [i for t in tokenized for i in t.ids])
    # Invented names are not whole words of the vocab: they split into syllable pieces.
    name_ids = tokenizer.tokenize_texts([docs[0]["title"].split()[0]])[0].ids
    self.assertGreater(len(name_ids), 1)
    self.assertTrue(tokenizer.vocab[name_ids[1]].startswith("##"))

  def test_accented_names_exist_and_tokenize(self):
    docs = synthetic.load_jsonl(os.path.join(_TESTDATA, "corpus.jsonl"))
    accented = [d for d in docs if "é" in d["body"]]
    self.assertNotEmpty(accented)
    tokenizer = tokenization.Tokenizer(os.path.join(_TESTDATA, "vocab.txt"))
    body = accented[0]["body"]
    piece = tokenizer.tokenize_texts([body])[0]
    raw = body.encode("utf-8")
    covered = [raw[s:e].decode("utf-8") for s, e in zip(piece.starts, piece.limits)]
    self.assertTrue(any("é" in c for c in covered), covered)


if __name__ == "__main__":
  tf.test.main()
