-- Argo CD health check for keymesh.io/CacheCluster (resource.customizations.health.keymesh.io_CacheCluster).
-- Reads the operator's status: observedGeneration, phase, the Progressing, Degraded and Ready
-- conditions, and spec.upgrade.paused. Tested with health_test.yaml on Lua 5.1 (e2e/tests/argocd_health.rs).
local hs = {}

local function condition(conditions, kind)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function with_reason(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report a status"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local progressing = condition(status.conditions, "Progressing")
local degraded = condition(status.conditions, "Degraded")
local ready = condition(status.conditions, "Ready")
local upgrade = status.upgrade

-- A failed upgrade: the phase says so, the Progressing condition carries the pod's own error.
if status.phase == "UpgradeFailed" or (progressing ~= nil and progressing.status == "False" and progressing.reason == "UpgradeFailed") then
  hs.status = "Degraded"
  if progressing ~= nil and progressing.message ~= nil and progressing.message ~= "" then
    hs.message = "Upgrade failed: " .. progressing.message
  elseif upgrade ~= nil and upgrade.message ~= nil then
    hs.message = "Upgrade failed: " .. upgrade.message
  else
    hs.message = "Upgrade failed"
  end
  return hs
end

-- An invalid spec, pods not ready or mesh links down on a cluster that ran.
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = with_reason(degraded)
  return hs
end
if status.phase == "Failed" or status.phase == "Degraded" then
  hs.status = "Degraded"
  hs.message = "Phase " .. status.phase
  return hs
end

-- Upgrades paused by the user: Argo CD's Suspended, whatever else waits.
local paused = obj.spec ~= nil and obj.spec.upgrade ~= nil and obj.spec.upgrade.paused == true
if paused then
  hs.status = "Suspended"
  if progressing ~= nil and progressing.status == "True" then
    hs.message = "Upgrades paused (spec.upgrade.paused); " .. with_reason(progressing)
  else
    hs.message = "Upgrades paused (spec.upgrade.paused)"
  end
  return hs
end

-- Creating, scaling, upgrading: the Progressing condition says which and what it waits for.
if progressing ~= nil and progressing.status == "True" then
  hs.status = "Progressing"
  hs.message = with_reason(progressing)
  return hs
end

if status.phase == "Running" and ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
  return hs
end

hs.status = "Progressing"
if ready ~= nil and ready.message ~= nil then
  hs.message = "Waiting for the cluster to be ready: " .. ready.message
else
  hs.message = "Waiting for the cluster to be ready"
end
return hs
