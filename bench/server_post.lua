-- wrk script of bench/server_load.sh: every request the same greedy
-- completion of MAX_TOKENS tokens (the environment's, default 16).
local n = os.getenv("MAX_TOKENS") or "16"
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"prompt": "Write a short story about a robot who learns to paint.", "max_tokens": '
    .. n .. ', "ignore_eos": true}'

-- Every status other than 200 is counted, so a lost request shows.
local bad = 0
function response(status, headers, body)
    if status ~= 200 then bad = bad + 1 end
end
