#!/bin/sh
# CTest hands each case's name to doctest as a filter, and CMake splits a name at ';' when it
# registers it: such a case would be registered under half its name, select nothing and pass
# without running. Fails, naming them, when any test case name holds a ';'.
bad=$("$1" --list-test-cases --no-version | grep ';')
if [ -n "$bad" ]; then
  echo "test case names with ';' (they would run nothing under CTest):" >&2
  echo "$bad" >&2
  exit 1
fi
