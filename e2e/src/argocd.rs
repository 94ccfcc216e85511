//! Runs an Argo CD resource health check (`health.lua`) the way Argo CD does: the object as the
//! global `obj`, the script's return value `hs` with `hs.status` and `hs.message`, and only the
//! libraries Argo CD's Lua VM opens (base, table, string, math), on a Lua 5.1 interpreter (Argo
//! CD's gopher-lua implements Lua 5.1). Also reads Argo CD's `health_test.yaml` format.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::chart::{repo_root, system_tool, ChartError};

/// Where the CacheCluster health check lives, laid out as Argo CD's `resource_customizations`.
pub const CUSTOMIZATION_DIR: &str = "manifests/argocd/resource_customizations/keymesh.io/CacheCluster";

#[derive(Debug, thiserror::Error)]
pub enum ArgocdError {
    #[error(transparent)]
    Tool(#[from] ChartError),
    #[error("failed to run lua5.1: {0}")]
    Spawn(std::io::Error),
    #[error("health.lua failed on this object: {0}")]
    Script(String),
}

/// What a health check returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub status: String,
    pub message: String,
}

/// The CacheCluster health check.
pub fn health_script() -> PathBuf {
    repo_root().join(CUSTOMIZATION_DIR).join("health.lua")
}

/// Runs `script` on `object`.
pub fn evaluate(script: &Path, object: &Value) -> Result<Health, ArgocdError> {
    let lua = system_tool("lua5.1")?;
    let program = format!(
        r#"local obj = {object}
local chunk = assert(loadfile({script}))
-- Argo CD's VM opens only these libraries; the check must not need more.
setfenv(chunk, {{ obj = obj, ipairs = ipairs, pairs = pairs, next = next, type = type, tostring = tostring,
  tonumber = tonumber, select = select, unpack = unpack, error = error, pcall = pcall,
  string = string, table = table, math = math }})
local ok, hs = pcall(chunk)
if not ok then io.stderr:write(tostring(hs)); os.exit(2) end
if type(hs) ~= "table" or type(hs.status) ~= "string" then io.stderr:write("the script must return a table with a string status"); os.exit(3) end
if hs.message ~= nil and type(hs.message) ~= "string" then io.stderr:write("hs.message must be a string"); os.exit(3) end
io.write(hs.status, "\0", hs.message or "")
"#,
        object = lua_literal(object),
        script = lua_string(&script.display().to_string()),
    );
    let mut child = Command::new(lua).arg("-").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(ArgocdError::Spawn)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(program.as_bytes()).map_err(ArgocdError::Spawn)?;
    }
    let out = child.wait_with_output().map_err(ArgocdError::Spawn)?;
    if !out.status.success() {
        return Err(ArgocdError::Script(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let (status, message) = text.split_once('\0').unwrap_or((&text, ""));
    Ok(Health { status: status.to_owned(), message: message.to_owned() })
}

/// One case of Argo CD's `health_test.yaml`.
#[derive(Debug, Clone)]
pub struct HealthTest {
    pub expected: Health,
    /// Relative to the customization directory.
    pub input_path: String,
}

/// The cases of `health_test.yaml` in the customization directory.
pub fn health_tests() -> Result<Vec<HealthTest>, ChartError> {
    let path = format!("{CUSTOMIZATION_DIR}/health_test.yaml");
    let doc: Value = serde_yaml::from_str(&crate::chart::read(&path)?).map_err(|e| ChartError::Parse { what: path.clone(), reason: e.to_string() })?;
    let tests = doc["tests"].as_array().ok_or_else(|| ChartError::Parse { what: path.clone(), reason: "no `tests` list".into() })?;
    tests
        .iter()
        .map(|t| {
            let field = |v: &Value, what: &str| {
                v.as_str().map(str::to_owned).ok_or_else(|| ChartError::Parse { what: path.clone(), reason: format!("a test without {what}: {t}") })
            };
            Ok(HealthTest {
                expected: Health {
                    status: field(&t["healthStatus"]["status"], "healthStatus.status")?,
                    message: field(&t["healthStatus"]["message"], "healthStatus.message")?,
                },
                input_path: field(&t["inputPath"], "inputPath")?,
            })
        })
        .collect()
}

/// A JSON value as a Lua table constructor (objects keyed by string, arrays 1-based, null as
/// nil), as Argo CD hands objects to its Lua VM.
pub fn lua_literal(value: &Value) -> String {
    match value {
        Value::Null => "nil".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => lua_string(s),
        Value::Array(items) => format!("{{{}}}", items.iter().map(lua_literal).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => {
            let fields: Vec<String> = map.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| format!("[{}] = {}", lua_string(k), lua_literal(v))).collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

/// A Lua string literal: printable ASCII as is, everything else as decimal byte escapes.
fn lua_string(s: &str) -> String {
    let mut out = String::from("\"");
    for byte in s.bytes() {
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\{byte:03}")),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_and_skip_nulls() {
        let value = serde_json::json!({"a": [1, "x\"y\n"], "b": null, "c": {"d": true}});
        assert_eq!(lua_literal(&value), r#"{["a"] = {1, "x\"y\010"}, ["c"] = {["d"] = true}}"#);
        assert_eq!(lua_string("é"), "\"\\195\\169\"");
    }
}
