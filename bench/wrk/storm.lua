-- Duplicate storm: each thread sends STORM_GROUP (= its connection count) consecutive
-- requests with one key, and every thread walks the same key sequence, so each intent
-- arrives about connections-many times at once: one executes, the rest get 409 while it
-- runs and the replay after.
dofile(os.getenv("WRK_LUA_DIR") .. "/common.lua")
local path = os.getenv("WRK_PATH") or "/charges"
local group = tonumber(os.getenv("STORM_GROUP") or "16")
local body = '{"amount":100,"currency":"eur"}'
local headers = { ["Content-Type"] = "application/json" }
local n = 0
function request()
  headers["Idempotency-Key"] = "s-" .. run_id .. "-" .. math.floor(n / group)
  n = n + 1
  return wrk.format("POST", path, headers, body)
end
