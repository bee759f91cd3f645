-- wrk: every request carries X-Api-Key: k1 .. k100000, at random (100k distinct bucket keys).
math.randomseed(42)
request = function()
  return wrk.format(nil, nil, { ["X-Api-Key"] = "k" .. math.random(100000) })
end
