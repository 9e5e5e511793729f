"""SavedModel export of the query/document towers and the open-QA model, for serving."""
