-- wrk: every request a POST whose 1024-byte body (1024 bytes of 'a') comes in
-- four 256-byte chunks (Transfer-Encoding: chunked), built once.
local chunk = "100\r\n" .. string.rep("a", 256) .. "\r\n"
local req = "POST / HTTP/1.1\r\nHost: " .. wrk.host .. ":" .. wrk.port .. "\r\n"
  .. "Content-Type: application/json\r\n"
  .. "Transfer-Encoding: chunked\r\n\r\n"
  .. string.rep(chunk, 4)
  .. "0\r\n\r\n"
request = function()
  return req
end
