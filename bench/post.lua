-- wrk script: POST AdmissionReview bodies and print the results as one JSON line.
-- The body file is named by BENCH_BODY_FILE: one body, or with BENCH_BODY_LINES=1 one body per line, sent in
-- turn. It runs once per wrk thread (and in the main state).
local path = os.getenv("BENCH_BODY_FILE")
local file = assert(io.open(path, "rb"), "BENCH_BODY_FILE must name a readable file")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if os.getenv("BENCH_BODY_LINES") == "1" then
  local bodies = {}
  for line in file:lines() do
    bodies[#bodies + 1] = line
  end
  file:close()
  local requests = {}
  local next_request = 0
  -- Formatted in init(), once wrk has set the Host header.
  function init(args)
    for index, body in ipairs(bodies) do
      requests[index] = wrk.format("POST", nil, nil, body)
    end
  end
  -- Pre-formatted requests, one Lua call per request: still far cheaper than the server's work per request.
  function request()
    next_request = next_request % #requests + 1
    return requests[next_request]
  end
else
  wrk.body = file:read("*a")
  file:close()
  -- No request()/response() functions: wrk then reuses one pre-formatted request and skips Lua per
  -- response, so the load generator stays cheap enough to saturate the server on a shared 2-core box.
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,"errors":{"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d},"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
