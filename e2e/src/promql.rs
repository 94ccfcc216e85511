//! The metric names a PromQL expression reads (for checking dashboards and alerts against live
//! `/metrics` scrapes), and the metric families a Prometheus text exposition declares.
//!
//! Not a PromQL parser: it drops what cannot name a metric (strings, label matchers `{...}`,
//! ranges and subqueries `[...]`, the label lists of `by`/`without`/`on`/`ignoring`/`group_*`,
//! numbers and durations), then keeps identifiers that are neither a function call, a keyword nor
//! an aggregation. `promtool` checks the expressions' syntax separately.

use std::collections::BTreeSet;

const KEYWORDS: [&str; 13] = ["and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "inf", "nan"];

/// Aggregation operators, which may be followed by `by (...)` before their parenthesis.
const AGGREGATIONS: [&str; 14] =
    ["sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"];

/// The metric names `expr` reads; histogram series (`_bucket`, `_sum`, `_count`) are kept as
/// written.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let cleaned = strip_brackets(&strip_strings(expr));
    let chars: Vec<char> = cleaned.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_label_list = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace()).copied();
            let lower = word.to_ascii_lowercase();
            if ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&lower.as_str()) {
                skip_label_list = next == Some('(');
            } else if next == Some('(') || KEYWORDS.contains(&lower.as_str()) || AGGREGATIONS.contains(&lower.as_str()) {
                // A function or aggregation call, or an operator keyword.
            } else if !skip_label_list {
                names.insert(word);
            }
            continue;
        }
        if c == '(' && skip_label_list {
            // Skip the label list of a grouping modifier.
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            skip_label_list = false;
        } else if c.is_ascii_digit() || c == '.' {
            // Numbers and durations (5m, 1.5e3) are not names.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        i += 1;
    }
    names
}

/// Replaces every quoted string with a space.
fn strip_strings(expr: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                    out.push(' ');
                }
            }
            None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
            None => out.push(c),
        }
    }
    out
}

/// Removes `{...}` label matchers and `[...]` ranges.
fn strip_brackets(expr: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in expr.chars() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The metric names a text exposition has samples for (a histogram `x` gives `x_bucket`,
/// `x_sum`, `x_count`).
pub fn exposed_names(exposition: &str) -> BTreeSet<String> {
    exposition.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).filter_map(|l| l.split(['{', ' ']).next()).map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        metric_names(expr).into_iter().collect()
    }

    #[test]
    fn aggregations_matchers_ranges_and_keywords_are_not_names() {
        assert_eq!(
            names(r#"max by (namespace, pod) (keymesh_memory_used_bytes{pod=~"a.*"} / (keymesh_maxmemory_bytes > 0)) > 0.9"#),
            ["keymesh_maxmemory_bytes", "keymesh_memory_used_bytes"]
        );
        assert_eq!(
            names("histogram_quantile(0.99, sum by (pod, le) (rate(keymesh_command_duration_seconds_bucket{namespace=~\"$namespace\"}[$__rate_interval])))"),
            ["keymesh_command_duration_seconds_bucket"]
        );
        assert_eq!(names("sum(rate(a_total[5m] offset 1h)) and on (pod) b == bool 1 unless c"), ["a_total", "b", "c"]);
        assert_eq!(names("1 - x{state=\"connected\"} * 1.5e3"), ["x"]);
    }

    #[test]
    fn exposition_names_include_histogram_series() {
        let text = "# HELP h help\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_sum 0\nh_count 0\nup 1\n";
        assert_eq!(exposed_names(text).into_iter().collect::<Vec<_>>(), ["h_bucket", "h_count", "h_sum", "up"]);
    }
}
