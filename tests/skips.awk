# The skipped tests of one stage's output, one line each, "TEST: REASON",
# for tests/run_tests.sh's closing summary.  It reads the skip lines of every
# runner the suite uses:
#   cmocka      "skipping: REASON" (tests/testutil.h, tu_skipping) before
#               "[  SKIPPED ] TEST"; a reason printed by a group's setup
#               serves its tests that print none
#   ds4_test    "  skipped: REASON" before "NAME: SKIP"
#   pytest -rs  "SKIPPED [N] FILE:LINE: REASON"
#   scripts     "SKIP NAME: REASON" (tests/python.sh), "=== NAME: SKIPPED (REASON)"
#               (scripts/portability.sh)
/^\[==========\] Running / { summary = 0 }
/^\[==========\] .* run\.$/ { summary = 1 }   # its SKIPPED list repeats the tests
/^\[ RUN +\] /            { cur = "" }
/^skipping: /             { cur = substr($0, 11); last = cur }
/^\[  SKIPPED \] [^ ]+$/ && !summary { r = cur != "" ? cur : last
                            print $4 ": " (r != "" ? r : "no reason printed") }
/^  skipped: /            { ds4t = substr($0, 12) }
/^[a-z0-9-]+: SKIP$/      { print "ds4_test --" substr($1, 1, length($1) - 1) ": " ds4t }
/^SKIPPED \[[0-9]+\] /    { sub(/^SKIPPED \[[0-9]+\] /, ""); print }
/^SKIP [^:]+: /           { print substr($0, 6) }
/^=== .*: SKIPPED \(.*\)$/ { s = substr($0, 5); sub(/: SKIPPED \(/, ": ", s); sub(/\)$/, "", s); print s }
