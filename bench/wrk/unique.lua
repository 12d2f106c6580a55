-- Fresh intents: every request carries a new Idempotency-Key (u-<run>-<thread>-<n>).
dofile(os.getenv("WRK_LUA_DIR") .. "/common.lua")
local path = os.getenv("WRK_PATH") or "/charges"
local body = '{"amount":100,"currency":"eur"}'
local headers = { ["Content-Type"] = "application/json" }
local n = 0
function request()
  n = n + 1
  headers["Idempotency-Key"] = "u-" .. run_id .. "-" .. tid .. "-" .. n
  return wrk.format("POST", path, headers, body)
end
