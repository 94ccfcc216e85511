//! The Helm chart and the tools that check it, for the chart and GitOps tests: `helm` without a
//! cluster (lint, template with chosen API versions, package), the chart's values table
//! (generated from the comments in `values.yaml` into its README), and the Debian tools the
//! checks run (`promtool`, `lua5.1`, `docker-registry`), each found or reported with the script
//! that installs it.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::control_plane::{helm_binary, helm_command};

/// The chart's directory, relative to the repository root.
pub const CHART_DIR: &str = "charts/keymesh-operator";

/// The markers between which the chart README holds the generated values table.
pub const VALUES_BEGIN: &str = "<!-- values table: generated from values.yaml by e2e/tests/chart.rs; do not edit -->";
pub const VALUES_END: &str = "<!-- end of values table -->";

#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("{tool} not found ({hint})")]
    MissingTool { tool: String, hint: String },
    #[error("failed to run `{command}`: {reason}")]
    Command { command: String, reason: String },
    #[error("failed to read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("values.yaml line {line}: {reason}")]
    Values { line: usize, reason: String },
    #[error("failed to parse {what}: {reason}")]
    Parse { what: String, reason: String },
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    crate::local_cluster::repo_root()
}

/// `name` on the PATH (Debian puts promtool, lua5.1 and docker-registry in /usr/bin).
pub fn system_tool(name: &str) -> Result<PathBuf, ChartError> {
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&dirs)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| ChartError::MissingTool { tool: name.to_owned(), hint: "scripts/install-deps.sh installs it".to_owned() })
}

/// Runs `program args...`; its stdout, or an error with its stderr.
pub fn run<I, S>(mut command: Command, args: I) -> Result<String, ChartError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    command.args(args);
    let shown = format!("{command:?}");
    let out = command.output().map_err(|e| ChartError::Command { command: shown.clone(), reason: e.to_string() })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(ChartError::Command {
            command: shown,
            reason: format!("{}: {}{}", out.status, String::from_utf8_lossy(&out.stderr).trim(), String::from_utf8_lossy(&out.stdout).trim()),
        })
    }
}

/// `helm` without a cluster: its config, cache and data in a directory of its own.
pub struct OfflineHelm {
    helm: PathBuf,
    home: tempfile::TempDir,
}

impl OfflineHelm {
    pub fn new() -> Result<OfflineHelm, ChartError> {
        let helm = helm_binary().map_err(|e| ChartError::MissingTool { tool: "helm".into(), hint: e.to_string() })?;
        let home = tempfile::tempdir().map_err(|e| ChartError::Read { path: std::env::temp_dir(), reason: e.to_string() })?;
        Ok(OfflineHelm { helm, home })
    }

    /// Runs `helm args...` in the repository root.
    pub fn run<I, S>(&self, args: I) -> Result<String, ChartError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = helm_command(&self.helm, self.home.path());
        command.current_dir(repo_root());
        run(command, args)
    }

    /// `helm template` of the chart as release `keymesh-operator` in `keymesh-system`, with
    /// `args` (e.g. `--set k=v`, `--api-versions g/v/Kind`); the rendered objects.
    pub fn render(&self, args: &[&str]) -> Result<Vec<Value>, ChartError> {
        let mut all = vec!["template", "keymesh-operator", CHART_DIR, "--namespace", "keymesh-system"];
        all.extend_from_slice(args);
        parse_documents(&self.run(all)?, "helm template output")
    }
}

/// Every non-empty document of a multi-document YAML stream, as JSON values.
pub fn parse_documents(text: &str, what: &str) -> Result<Vec<Value>, ChartError> {
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value: Value = serde::Deserialize::deserialize(document).map_err(|e| ChartError::Parse { what: what.to_owned(), reason: e.to_string() })?;
        if !value.is_null() {
            objects.push(value);
        }
    }
    Ok(objects)
}

/// Reads a file of the repository.
pub fn read(relative: &str) -> Result<String, ChartError> {
    let path = repo_root().join(relative);
    std::fs::read_to_string(&path).map_err(|e| ChartError::Read { path, reason: e.to_string() })
}

/// One documented value: its dotted path, its description, its default as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueDoc {
    pub path: String,
    pub description: String,
    pub default: Value,
}

/// The values `values.yaml` documents: every key with a comment right above it. Every value
/// must be documented, by its own comment or an ancestor's; blank lines end a comment, and
/// comments that end before a blank line (file headers) document nothing.
pub fn documented_values(values_yaml: &str) -> Result<Vec<ValueDoc>, ChartError> {
    let values: Value = serde_yaml::from_str(values_yaml).map_err(|e| ChartError::Parse { what: "values.yaml".into(), reason: e.to_string() })?;
    let mut docs = Vec::new();
    let mut comment: Vec<String> = Vec::new();
    let mut stack: Vec<(usize, String, bool)> = Vec::new(); // (indent, key, documented)
    for (index, line) in values_yaml.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            comment.clear();
            continue;
        }
        if let Some(text) = trimmed.strip_prefix('#') {
            comment.push(text.trim().to_owned());
            continue;
        }
        if trimmed.starts_with('-') {
            return Err(ChartError::Values { line: index + 1, reason: "block sequences are not supported; write lists inline ([a, b])".into() });
        }
        let Some((key, rest)) = trimmed.split_once(':') else {
            return Err(ChartError::Values { line: index + 1, reason: format!("expected `key: value`, got `{trimmed}`") });
        };
        while stack.last().is_some_and(|(i, _, _)| *i >= indent) {
            stack.pop();
        }
        let path: Vec<&str> = stack.iter().map(|(_, k, _)| k.as_str()).chain([key]).collect();
        let ancestor_documented = stack.iter().any(|(_, _, documented)| *documented);
        let documented = !comment.is_empty();
        let is_leaf = !rest.trim().is_empty();
        if documented {
            let default = path.iter().try_fold(&values, |v, k| v.get(*k)).cloned().unwrap_or(Value::Null);
            docs.push(ValueDoc { path: path.join("."), description: comment.join(" "), default });
        } else if is_leaf && !ancestor_documented {
            return Err(ChartError::Values { line: index + 1, reason: format!("`{}` has no comment (nor has any key above it)", path.join(".")) });
        }
        stack.push((indent, key.to_owned(), documented || ancestor_documented));
        comment.clear();
    }
    Ok(docs)
}

/// The README's values table (Markdown) for `docs`.
pub fn values_table(docs: &[ValueDoc]) -> String {
    let mut out = String::from("| value | default | description |\n| --- | --- | --- |\n");
    for doc in docs {
        let default = serde_json::to_string(&doc.default).unwrap_or_default().replace('|', "\\|");
        out.push_str(&format!("| `{}` | `{default}` | {} |\n", doc.path, doc.description.replace('|', "\\|")));
    }
    out
}

/// Replaces the part of `readme` between [`VALUES_BEGIN`] and [`VALUES_END`] with `table`.
pub fn with_values_table(readme: &str, table: &str) -> Result<String, ChartError> {
    let missing = || ChartError::Parse { what: "the chart README".into(), reason: format!("no `{VALUES_BEGIN}` ... `{VALUES_END}` section") };
    let start = readme.find(VALUES_BEGIN).ok_or_else(missing)? + VALUES_BEGIN.len();
    let end = readme[start..].find(VALUES_END).ok_or_else(missing)? + start;
    Ok(format!("{}\n\n{table}\n{}", &readme[..start], &readme[end..]))
}

/// Leaf paths of a JSON value (objects are walked, anything else is a leaf; empty objects are
/// leaves too).
pub fn leaf_paths(value: &Value) -> Vec<String> {
    fn walk(value: &Value, prefix: &str, out: &mut Vec<String>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    walk(v, &if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, out);
                }
            }
            _ => out.push(prefix.to_owned()),
        }
    }
    let mut out = Vec::new();
    walk(value, "", &mut out);
    out
}

/// The objects of `kind` in `objects`, by name.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> BTreeMap<String, &'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).map(|o| (o["metadata"]["name"].as_str().unwrap_or_default().to_owned(), o)).collect()
}

/// `path` relative to the repository root, as a string for command lines.
pub fn repo_path(relative: &str) -> String {
    repo_root().join(relative).display().to_string()
}

/// Whether `path` exists under the repository root.
pub fn exists(relative: &str) -> bool {
    Path::new(&repo_root()).join(relative).exists()
}

/// Every alerting rule of the chart's `files/prometheus-rules.yaml`.
pub fn alert_rules() -> Result<Vec<Value>, ChartError> {
    let path = format!("{CHART_DIR}/files/prometheus-rules.yaml");
    let rules: Value = serde_yaml::from_str(&read(&path)?).map_err(|e| ChartError::Parse { what: path.clone(), reason: e.to_string() })?;
    Ok(rules["groups"].as_array().into_iter().flatten().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default()).collect())
}

/// Every query of the chart's dashboard as `(panel title, expr)`, with Grafana's variables
/// replaced by values Prometheus accepts.
pub fn dashboard_queries() -> Result<Vec<(String, String)>, ChartError> {
    let path = format!("{CHART_DIR}/files/dashboards/keymesh.json");
    let dashboard: Value = serde_json::from_str(&read(&path)?).map_err(|e| ChartError::Parse { what: path.clone(), reason: e.to_string() })?;
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .ok_or_else(|| ChartError::Parse { what: path.clone(), reason: format!("a target without expr in {}", panel["title"]) })?;
            let concrete = expr.replace("$__rate_interval", "5m").replace("$namespace", ".*").replace("$cachecluster", ".*");
            out.push((panel["title"].as_str().unwrap_or("?").to_owned(), concrete));
        }
    }
    Ok(out)
}

/// Every metric name the chart's dashboard and alerts read.
pub fn used_metric_names() -> Result<std::collections::BTreeSet<String>, ChartError> {
    let mut names: std::collections::BTreeSet<String> = dashboard_queries()?.iter().flat_map(|(_, q)| crate::promql::metric_names(q)).collect();
    names.extend(alert_rules()?.iter().flat_map(|a| crate::promql::metric_names(a["expr"].as_str().unwrap_or_default())));
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_document_keys_and_their_subtrees() {
        let yaml =
            "# header, not a value\n\n# Replicas.\nreplicaCount: 2\nimage:\n  # The tag.\n  tag: \"\"\n# Resources.\nresources:\n  limits:\n    memory: 1Gi\n";
        let docs = documented_values(yaml).expect("documented");
        let paths: Vec<&str> = docs.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["replicaCount", "image.tag", "resources"]);
        assert_eq!(docs[2].default, serde_json::json!({"limits": {"memory": "1Gi"}}));
        assert_eq!(docs[0].description, "Replicas.");
    }

    #[test]
    fn an_undocumented_value_is_an_error() {
        let err = documented_values("image:\n  tag: x\n").expect_err("undocumented");
        assert!(err.to_string().contains("image.tag"), "{err}");
    }

    #[test]
    fn the_table_replaces_only_its_section() {
        let readme = format!("intro\n{VALUES_BEGIN}\nold\n{VALUES_END}\nafter\n");
        let out = with_values_table(&readme, "| t |\n").expect("section found");
        assert_eq!(out, format!("intro\n{VALUES_BEGIN}\n\n| t |\n\n{VALUES_END}\nafter\n"));
    }
}
