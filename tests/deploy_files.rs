//! The files in docs/deploy/ refer to the server as it is: every metric
//! named by the Grafana dashboard and the Prometheus alert rules exists in
//! `metrics::Family` (a histogram's `_bucket`, `_sum` and `_count` series
//! included), the dashboard is valid JSON with a query per panel, every
//! alert rule has an expression, and the systemd unit keeps the notify and
//! exit-status settings the server relies on. `scripts/check-deploy.sh`
//! runs `promtool check rules` on the alert rules.

use ringstream::metrics::{Family, Kind};
use std::collections::BTreeSet;
use std::path::Path;

fn deploy(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/deploy").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every series name the server exports, and each family's own name (the
/// descriptions name histogram families as such).
fn exported() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for f in Family::ALL {
        names.insert(f.name().to_string());
        if f.kind() == Kind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{}{suffix}", f.name()));
            }
        }
    }
    names
}

/// Words of `text` that look like our metric names.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("ringstream_") || w.starts_with("process_"))
        .map(str::to_string)
        .collect()
}

fn unknown(used: &BTreeSet<String>) -> Vec<String> {
    let have = exported();
    used.iter().filter(|n| !have.contains(*n)).cloned().collect()
}

#[test]
fn the_dashboard_queries_metrics_that_exist() {
    let dash: serde_json::Value = serde_json::from_str(&deploy("grafana-dashboard.json")).expect("valid JSON");
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut used = BTreeSet::new();
    for p in panels {
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("panel {} has no targets", p["title"]));
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            used.extend(metric_names(t["expr"].as_str().expect("expr")));
        }
    }
    assert!(unknown(&used).is_empty(), "the dashboard uses metrics that do not exist: {:?}", unknown(&used));
    for must in ["ringstream_append_seconds_bucket", "ringstream_http_requests_total", "process_cpu_seconds_total"] {
        assert!(used.contains(must), "the dashboard does not show {must}");
    }
}

#[test]
fn the_alert_rules_use_metrics_that_exist() {
    let rules = deploy("prometheus-alerts.yml");
    let used = metric_names(&rules);
    assert!(unknown(&used).is_empty(), "the alert rules use metrics that do not exist: {:?}", unknown(&used));
    let alerts: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).collect();
    for must in [
        "RingstreamShardLogPoisoned",
        "RingstreamDiskNearlyFull",
        "RingstreamAppendLatencyHigh",
        "RingstreamUnavailableAnswers",
    ] {
        assert!(alerts.contains(&must), "no alert {must}: {alerts:?}");
    }
    assert_eq!(rules.matches("\n        expr:").count(), alerts.len(), "every alert has an expr");
    for (name, metric) in [
        ("poisoned", "ringstream_log_poisoned"),
        ("disk", "ringstream_disk_free_bytes"),
        ("p99", "ringstream_append_seconds_bucket"),
        ("503", "ringstream_http_requests_total"),
    ] {
        assert!(used.contains(metric), "the {name} alert should use {metric}");
    }
}

#[test]
fn the_systemd_unit_waits_for_ready_and_does_not_restart_config_errors() {
    let unit = deploy("ringstream.service");
    let settings: Vec<&str> = unit.lines().filter(|l| !l.starts_with('#')).collect();
    for must in ["Type=notify", "RestartPreventExitStatus=78", "Restart=on-failure", "LimitMEMLOCK=infinity"] {
        assert!(settings.contains(&must), "the unit lacks {must}");
    }
    assert!(settings.iter().any(|l| l.starts_with("WatchdogSec=")), "the unit sets no WatchdogSec");
}
