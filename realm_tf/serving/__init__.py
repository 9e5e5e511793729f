"""Serving: the HTTP/REST question-answering server over an exported open-QA SavedModel, and its page."""
