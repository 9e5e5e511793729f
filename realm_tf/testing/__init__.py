"""Test scaffolding shared by tests, benchmarks and tools: never imported by product code (realm_tf's
other packages and bin/'s programs; tools/import_graph_test checks it). realm_tf/testing_utils.py holds
the smaller helpers (files, vocabularies, released-checkpoint fixtures)."""
