-- POST /v1/check bodies for wrk, built once and sent in turn: single checks
-- (BATCH=1) over 1,000 keys, or batches of BATCH checks over 100 x BATCH keys.
local batch = tonumber(os.getenv("BATCH") or "1")
local requests = {}

local function check(key)
  return string.format('{"rule":"per-key","key":"k%d","cost":1}', key)
end

function init(args)
  local headers = { ["Content-Type"] = "application/json" }
  local count = batch == 1 and 1000 or 100
  for i = 0, count - 1 do
    local body
    if batch == 1 then
      body = check(i)
    else
      local checks = {}
      for j = 0, batch - 1 do
        checks[#checks + 1] = check(i * batch + j)
      end
      body = "[" .. table.concat(checks, ",") .. "]"
    end
    requests[#requests + 1] = wrk.format("POST", "/v1/check", headers, body)
  end
end

local next_request = 0

function request()
  next_request = next_request % #requests + 1
  return requests[next_request]
end

-- Any answer but 200 means the figure is not decisions: say so.
function response(status, headers, body)
  if status ~= 200 then
    io.stderr:write("unexpected status " .. status .. ": " .. body .. "\n")
    os.exit(1)
  end
end
