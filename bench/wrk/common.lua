-- Shared by every bench script: thread ids for key generation, and a JSON summary
-- written to $WRK_OUT when the run ends (requests, errors, latency percentiles in µs).
run_id = os.getenv("RUN") or "bench"

local next_tid = 0
function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
end

function done(summary, latency, requests)
  local out = os.getenv("WRK_OUT")
  if not out then return end
  local f = assert(io.open(out, "w"))
  local e = summary.errors
  f:write(string.format(
    '{"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,"read_errors":%d,' ..
    '"write_errors":%d,"status_errors":%d,"timeouts":%d,"p50_us":%d,"p90_us":%d,' ..
    '"p99_us":%d,"p999_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max, latency.mean))
  f:close()
end
