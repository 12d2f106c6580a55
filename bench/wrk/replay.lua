-- Replays: requests cycle over a small set of keys (lt-<run>-0 .. lt-<run>-<N-1>) that
-- `idem loadtest --run-id <run>` completed before the run, with the same body.
dofile(os.getenv("WRK_LUA_DIR") .. "/common.lua")
local path = os.getenv("WRK_PATH") or "/charges"
local keys = tonumber(os.getenv("REPLAY_KEYS") or "100")
local body = '{"amount":100,"currency":"eur"}'
local headers = { ["Content-Type"] = "application/json" }
local n = 0
function request()
  n = n + 1
  headers["Idempotency-Key"] = "lt-" .. run_id .. "-" .. ((n + tid * 7) % keys)
  return wrk.format("POST", path, headers, body)
end
