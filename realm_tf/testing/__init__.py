"""Test scaffolding shared by tests, benchmarks and tools: never imported by product code (realm_tf's
other packages and bin/'s programs; tools/import_graph_test checks it)."""
