-- wrk script for the HTTP gateway: POST a JSON echo body whose "data" is BYTES characters
-- (default 16384) to PATH (default /v1/echo) and check every answer: status 200 and the body
-- byte for byte what was sent (echo answers {"data": ...} as it came). done() prints
-- "checked N wrong W" so a run with wrong answers is seen, not counted as throughput.
-- usage: wrk -s bench/http/post.lua URL -- BYTES [PATH]
local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   local n = tonumber(args[1] or "16384")
   wrk.method = "POST"
   wrk.path = args[2] or "/v1/echo"
   wrk.headers["Content-Type"] = "application/json"
   wrk.body = '{"data":"' .. string.rep("a", n) .. '"}'
   checked, wrong = 0, 0
end

function response(status, headers, body)
   checked = checked + 1
   if status ~= 200 or body ~= wrk.body then
      wrong = wrong + 1
   end
end

function done(summary, latency, requests)
   local c, w = 0, 0
   for _, t in ipairs(threads) do
      c = c + t:get("checked")
      w = w + t:get("wrong")
   end
   io.write(string.format("checked %d wrong %d\n", c, w))
end
