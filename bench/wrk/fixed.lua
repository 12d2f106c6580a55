-- Fixed-body POSTs, no idempotency key: the same request every time (wrk's fast path).
-- Used for "direct" and "passthrough" (a path no idem route matches).
dofile(os.getenv("WRK_LUA_DIR") .. "/common.lua")
wrk.method = "POST"
wrk.body = '{"amount":100,"currency":"eur"}'
wrk.headers["Content-Type"] = "application/json"
