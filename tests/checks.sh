# The helpers of the shell tests (cli.sh, conform.sh): sourced, not run.
# The sourcing script sets $tmp, a scratch folder, first.

fails=0

check() {   # check NAME CONDITION-COMMAND...: "ok   NAME" or "FAIL NAME" (counted)
    local name=$1; shift
    if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}

quiet() { "$@" > /dev/null 2>&1; }

status_is() {   # status_is WANT COMMAND...: stdout into $tmp/out.txt, stderr into $tmp/stderr
    local want=$1; shift
    "$@" > "$tmp/out.txt" 2> "$tmp/stderr"
    local got=$?
    # Under ASan, LeakSanitizer's own tracer sometimes dies at exit on a busy
    # machine ("LeakSanitizer has encountered a fatal error", exit 1: a known
    # fault of the tool, google/sanitizers#1353), which is not a leak (those
    # read "detected memory leaks").  Such a run says nothing about the
    # command, whatever its status (1, which some checks expect), so it runs
    # once more.
    if grep -q 'LeakSanitizer has encountered a fatal error' "$tmp/stderr"; then
        echo "  (LeakSanitizer's tracer failed at exit, not a leak: run again)"
        "$@" > "$tmp/out.txt" 2> "$tmp/stderr"
        got=$?
    fi
    [ "$got" -eq "$want" ] || { echo "  exit status $got, expected $want: $(tail -3 "$tmp/stderr")"; return 1; }
    # An error (2 and up) says why on stderr; 0 and 1 are verdicts.
    [ "$(wc -l < "$tmp/stderr")" -ge 1 ] || [ "$want" -le 1 ]
}
