# The helpers of the shell tests (cli.sh, conform.sh): sourced, not run.
# The sourcing script sets $tmp, a scratch folder, first.

fails=0

check() {   # check NAME CONDITION-COMMAND...: "ok   NAME" or "FAIL NAME" (counted)
    local name=$1; shift
    if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}

quiet() { "$@" > /dev/null 2>&1; }

lsan_failed() { grep -q 'LeakSanitizer has encountered a fatal error' "$tmp/stderr"; }

status_is() {   # status_is WANT COMMAND...: stdout into $tmp/out.txt, stderr into $tmp/stderr
    local want=$1; shift
    "$@" > "$tmp/out.txt" 2> "$tmp/stderr"
    local got=$?
    # Under ASan, LeakSanitizer's own tracer sometimes dies at exit ("LeakSanitizer
    # has encountered a fatal error", exit 1: a known fault of the tool,
    # google/sanitizers#1353), which is not a leak (those read "detected memory
    # leaks").  Such a run says nothing about the command, whatever its status
    # (1, which some checks expect).  It runs once more, with the tool saying
    # what went wrong; on a machine where the tracer fails every time (CI did,
    # twice in a row, on one conform check that passes here) the third run has
    # no leak check, says so as a skip, and the status is still checked.
    if lsan_failed; then
        echo "  (LeakSanitizer's tracer failed at exit, not a leak: run again)"
        LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}verbosity=1:log_threads=1 \
            "$@" > "$tmp/out.txt" 2> "$tmp/stderr"
        got=$?
        if lsan_failed; then
            echo "  LeakSanitizer's last words: $(grep -v 'HINT' "$tmp/stderr" | grep -iE 'tracer|attach|ptrace|stop|fail' | tail -4 | tr '\n' ' ')"
            echo "SKIP leak check of '${*:1:3} ...': LeakSanitizer's tracer failed twice on this machine"
            ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 "$@" > "$tmp/out.txt" 2> "$tmp/stderr"
            got=$?
        fi
    fi
    [ "$got" -eq "$want" ] || { echo "  exit status $got, expected $want: $(tail -3 "$tmp/stderr")"; return 1; }
    # An error (2 and up) says why on stderr; 0 and 1 are verdicts.
    [ "$(wc -l < "$tmp/stderr")" -ge 1 ] || [ "$want" -le 1 ]
}
