//! The chart's alerts and dashboard without a cluster: `promtool check rules` and `promtool test
//! rules` (every alert fires on synthetic series when it should, with its labels and
//! annotations, and stays silent otherwise); every alert has a severity and a runbook that
//! exists; the dashboard is valid JSON whose every query is valid PromQL (checked by promtool);
//! and every metric name they use is one the engine or the operator defines. The live check of
//! those names against real `/metrics` scrapes is in `chart_release.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::Command;

use keymesh_e2e::chart::{alert_rules, dashboard_queries, read, repo_path, repo_root, run, system_tool, used_metric_names, CHART_DIR};
use serde_json::Value;

fn promtool(args: &[&str]) -> String {
    let promtool = system_tool("promtool").unwrap();
    run(Command::new(promtool), args).unwrap_or_else(|e| panic!("{e}"))
}

fn alerts() -> Vec<Value> {
    alert_rules().unwrap()
}

#[test]
fn promtool_checks_and_unit_tests_the_alerts() {
    let checked = promtool(&["check", "rules", &repo_path(&format!("{CHART_DIR}/files/prometheus-rules.yaml"))]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", &repo_path(&format!("{CHART_DIR}/tests/prometheus-rules.test.yaml"))]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn every_alert_is_unit_tested_and_has_a_severity_and_a_runbook() {
    let tests: Value = serde_yaml::from_str(&read(&format!("{CHART_DIR}/tests/prometheus-rules.test.yaml")).unwrap()).unwrap();
    let tested: BTreeSet<String> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap().iter().map(|a| a["alertname"].as_str().unwrap().to_owned()))
        .collect();
    let runbook = read("docs/runbook.md").unwrap().to_lowercase();
    for alert in alerts() {
        let name = alert["alert"].as_str().expect("only alerting rules");
        assert!(tested.contains(name), "{name} has no promtool test");
        assert!(["critical", "warning", "info"].contains(&alert["labels"]["severity"].as_str().unwrap_or("")), "{name}: severity");
        for key in ["summary", "description", "runbook", "runbook_url"] {
            assert!(alert["annotations"][key].as_str().is_some_and(|s| !s.is_empty()), "{name}: annotation {key}");
        }
        let anchor = alert["annotations"]["runbook_url"].as_str().unwrap().rsplit_once('#').map(|(_, a)| a.to_owned()).unwrap();
        assert_eq!(anchor, name.to_lowercase(), "{name}: the runbook anchor");
        assert!(runbook.contains(&format!("## {anchor}")), "docs/runbook.md has no section for {name}");
    }
    let names: BTreeSet<&str> =
        ["KeyMeshMeshLinkDown", "KeyMeshReplicationLagHigh", "KeyMeshClockSkew", "KeyMeshMemoryNearMaxmemory", "KeyMeshEvictionsRising"]
            .into_iter()
            .chain(["KeyMeshPodNotSynced", "KeyMeshOperatorReconcileErrors", "KeyMeshUpgradeStuck"])
            .collect();
    let defined: BTreeSet<String> = alerts().iter().map(|a| a["alert"].as_str().unwrap().to_owned()).collect();
    for name in names {
        assert!(defined.contains(name), "the alert {name} is missing");
    }
}

#[test]
fn every_dashboard_query_is_valid_promql() {
    let queries = dashboard_queries().unwrap();
    assert!(queries.len() >= 20, "{} queries", queries.len());
    // promtool checks PromQL as recording rules; one rule per query.
    let rules: Vec<Value> =
        queries.iter().enumerate().map(|(i, (_, expr))| serde_json::json!({"record": format!("dashboard:query_{i}"), "expr": expr})).collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard-queries.yaml");
    std::fs::write(&file, serde_yaml::to_string(&serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]})).unwrap()).unwrap();
    let checked = promtool(&["check", "rules", &file.display().to_string()]);
    assert!(checked.contains("SUCCESS"), "{checked}");
}

#[test]
fn dashboard_panels_have_unique_ids_and_use_the_datasource_variable() {
    let dashboard: Value = serde_json::from_str(&read(&format!("{CHART_DIR}/files/dashboards/keymesh.json")).unwrap()).unwrap();
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(ids.insert(panel["id"].as_i64().unwrap()), "duplicate panel id {}", panel["id"]);
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
        }
    }
    let variables: Vec<&str> = dashboard["templating"]["list"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(variables, ["datasource", "namespace", "cachecluster"]);
}

#[test]
fn every_metric_used_is_defined_by_the_engine_or_the_operator() {
    let mut sources = String::new();
    for dir in ["engine/src", "operator/src"] {
        for entry in walk(&repo_root().join(dir)) {
            sources.push_str(&std::fs::read_to_string(entry).unwrap());
        }
    }
    for name in used_metric_names().unwrap() {
        let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(&name);
        assert!(sources.contains(&format!("\"{family}\"")), "{name} is used by the dashboard or an alert but no code defines \"{family}\"");
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}
