"""py_test_group: a package's quick test files run in one test process (realm_tf/run_test_group.py)."""

def py_test_group(name, size, tests, deps, data = [], **kwargs):
    """One py_test that runs `tests`, *_test.py files of this package, in one process: TensorFlow is
    imported once instead of once per file. Each file of a group of several stays a py_test of its own,
    tagged manual. A group of one file is that file's target: it runs under run_test_group for the
    collector's pause through its imports (realm_tf/process_start.py)."""
    native.py_test(
        name = name,
        size = size,
        srcs = ["//realm_tf:run_test_group.py"] + tests,
        main = "//realm_tf:run_test_group.py",
        args = [native.package_name()] + tests,
        data = data,
        deps = deps + ["//realm_tf:run_test_group"],
        **kwargs
    )
