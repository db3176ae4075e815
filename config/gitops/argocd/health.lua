-- Argo CD health check for ratelimit.sluice.dev/RateLimitPolicy.
--
-- Reads the kstatus conditions the Sluice controller writes:
--   Healthy      Ready=True and status.observedGeneration == metadata.generation
--                (this generation is compiled and in force in Redis)
--   Degraded     Stalled=True (the spec does not compile; the message names
--                the field; the last good version stays in force)
--   Progressing  anything else: not yet reconciled, a new generation in
--                progress, or Redis unavailable (the controller retries)
local hs = {}
hs.status = "Progressing"
hs.message = "Waiting for the Sluice controller to apply this policy"

local function find(conditions, type)
  for _, c in ipairs(conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

if obj.status == nil or obj.status.conditions == nil then
  return hs
end

local stalled = find(obj.status.conditions, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.message or stalled.reason or "Stalled"
  return hs
end

local ready = find(obj.status.conditions, "Ready")
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if ready ~= nil and ready.status == "True" and observed ~= nil and observed == generation then
  hs.status = "Healthy"
  hs.message = ready.message or "Ready"
  return hs
end

local reconciling = find(obj.status.conditions, "Reconciling")
if reconciling ~= nil and reconciling.status == "True" and reconciling.message ~= nil then
  hs.message = reconciling.message
elseif ready ~= nil and ready.message ~= nil and ready.message ~= "" and observed == generation then
  hs.message = ready.message
else
  hs.message = "Waiting for the Sluice controller to apply generation " .. tostring(generation)
end
return hs
