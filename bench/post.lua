-- wrk script: POST one AdmissionReview body and print the results as one JSON line.
-- The body file is named by BENCH_BODY_FILE; it runs once per wrk thread (and in the main state).
local path = os.getenv("BENCH_BODY_FILE")
local file = assert(io.open(path, "rb"), "BENCH_BODY_FILE must name a readable file")
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"

-- No request()/response() functions: wrk then reuses one pre-formatted request and skips Lua per
-- response, so the load generator stays cheap enough to saturate the server on a shared 2-core box.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,"errors":{"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d},"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
