#!/bin/sh
echo "bazel coverage is not supported by realm_tf offline build" >&2
exit 1
