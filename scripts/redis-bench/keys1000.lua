-- wrk: every request carries X-Key: k0 .. k999, cycling (1,000 distinct bucket keys).
local i = 0
request = function()
  i = (i + 1) % 1000
  return wrk.format(nil, nil, { ["X-Key"] = "k" .. i })
end
