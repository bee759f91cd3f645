-- wrk: every request a POST with a 1024-byte JSON-typed body (1024 bytes of 'a').
wrk.method = "POST"
wrk.body = string.rep("a", 1024)
wrk.headers["Content-Type"] = "application/json"
