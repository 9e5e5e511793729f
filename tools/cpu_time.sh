#!/usr/bin/env bash
# bin/test's --run_under: runs one Bazel test (or one shard) and ends its log with the CPU seconds it
# used, user and system, of the test process and every process it waited for (the bin/ programs a test
# starts included). A target's wall time depends on what ran beside it (three at once, a bin/demo); its
# CPU time much less, so tools/test_summary.py reports both.
"$@"
rc=$?
# `times` in this shell, not in a pipe or $(...): a subshell has waited for no children, so it prints 0.
times_file="${TEST_TMPDIR:-/tmp}/realm_tf_cpu_times.$$"
times > "$times_file"
# Its second line: the children's user and system time, e.g. "0m12.345s 0m1.250s".
awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/);
               printf "realm_tf cpu_seconds: %.2f\n", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$times_file"
rm -f "$times_file"
exit $rc
