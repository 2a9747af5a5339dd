-- One wrk script for every measure, configured by environment variables (set by bench/load.py).
--
-- BENCH_MODE=fixed: every request is BENCH_METHOD BENCH_PATH with BENCH_BODY; a "%s" in the path or
--   body is replaced by a random id from the file BENCH_IDS (one per line).
-- BENCH_MODE=flow: each connection submits (BENCH_METHOD/PATH/BODY), takes the id out of the answer
--   with BENCH_ID_PATTERN, then polls (BENCH_POLL_METHOD/PATH/BODY, "%s" = id) every
--   BENCH_POLL_DELAY_MS until the answer matches BENCH_DONE_PATTERN; then it submits again.
--   Run it with as many threads as connections, so that each thread's state is one connection's.
-- Headers: BENCH_HEADERS for every request, BENCH_SUBMIT_HEADERS / BENCH_POLL_HEADERS for each kind,
--   written "Name: value" and separated by "|".
-- BENCH_UNIQUE_HEADER: the name of a header given a value of its own on every request (an
--   Idempotency-Key that never repeats: thread index, a random number per thread, a counter).
-- done() prints one JSON line that bench/load.py reads.

local env = os.getenv
local mode = env("BENCH_MODE") or "fixed"

local function parse_headers(spec, into)
  for item in string.gmatch(spec or "", "[^|]+") do
    local name, value = string.match(item, "^%s*([^:]+):%s*(.*)$")
    if name then into[name] = value end
  end
  return into
end

local function merged(extra)
  local h = parse_headers(env("BENCH_HEADERS"), {})
  return parse_headers(extra, h)
end

local method, path, body = env("BENCH_METHOD") or "GET", env("BENCH_PATH") or "/", env("BENCH_BODY")
local submit_headers = merged(env("BENCH_SUBMIT_HEADERS"))
local poll_headers = merged(env("BENCH_POLL_HEADERS"))
local poll_method, poll_path, poll_body = env("BENCH_POLL_METHOD") or "GET", env("BENCH_POLL_PATH"), env("BENCH_POLL_BODY")
local id_pattern, done_pattern = env("BENCH_ID_PATTERN"), env("BENCH_DONE_PATTERN")
local poll_delay = tonumber(env("BENCH_POLL_DELAY_MS") or "0")

local unique_header = env("BENCH_UNIQUE_HEADER")
local unique_prefix, unique_count = "", 0

local threads = {}
function setup(thread)
  thread:set("index", #threads + 1)
  table.insert(threads, thread)
end

local ids = {}
local fixed_request = nil
local state = "submit"   -- flow: what the next request is
local current = nil      -- flow: the id being polled
jobs, failures = 0, 0

function init(args)
  math.randomseed(os.time() * 1000 + (wrk.thread:get("index") or 0))
  local file = env("BENCH_IDS")
  if file then
    for line in io.lines(file) do
      if #line > 0 then table.insert(ids, line) end
    end
  end
  unique_prefix = string.format("%d-%d-", wrk.thread:get("index") or 0, math.random(1, 1000000000))
  if mode == "fixed" and #ids == 0 and not unique_header then
    fixed_request = wrk.format(method, path, submit_headers, body)
  end
end

local function fill(template, id)
  if template == nil then return nil end
  return (string.gsub(template, "%%s", id))
end

function request()
  if mode == "fixed" then
    if fixed_request then return fixed_request end
    if unique_header then
      unique_count = unique_count + 1
      submit_headers[unique_header] = unique_prefix .. unique_count
      if #ids == 0 then return wrk.format(method, path, submit_headers, body) end
    end
    local id = ids[math.random(#ids)]
    return wrk.format(method, fill(path, id), submit_headers, fill(body, id))
  end
  if state == "poll" then
    return wrk.format(poll_method, fill(poll_path, current), poll_headers, fill(poll_body, current))
  end
  return wrk.format(method, path, submit_headers, body)
end

if mode == "flow" then
  function delay()
    if state == "poll" then return poll_delay end
    return 0
  end

  function response(status, headers, text)
    if state == "submit" then
      current = status < 400 and string.match(text, id_pattern) or nil
      if current then state = "poll" else failures = failures + 1 end
      return
    end
    if status >= 400 then
      failures = failures + 1
      state = "submit"
    elseif string.find(text, done_pattern) then
      jobs = jobs + 1
      state = "submit"
    end
  end
end

function done(summary, latency, requests)
  local total_jobs, total_failures = 0, 0
  for _, t in ipairs(threads) do
    total_jobs = total_jobs + (t:get("jobs") or 0)
    total_failures = total_failures + (t:get("failures") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "errors": %d, "status_errors": %d, ' ..
    '"jobs": %d, "failures": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status, total_jobs, total_failures))
end
