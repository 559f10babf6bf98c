//! Names as the OpenTelemetry → Prometheus convention builds them (the
//! Collector's `pkg/translator/prometheus` with metric suffixes on, which
//! the Prometheus exporter and Prometheus' own OTLP receiver follow):
//!
//! - a metric name's words (runs of letters and digits) joined by `_`,
//!   then the unit's words if the name does not hold them already
//!   (`By` → `bytes`, `ms` → `milliseconds`, `By/s` →
//!   `bytes_per_second`; a `{annotation}` unit adds nothing), `ratio` for a
//!   gauge of unit `1`, and `total` last for a monotonic sum (a `total`
//!   elsewhere in the name moves there); a leading digit gets `_`;
//! - an attribute key's characters outside `[a-zA-Z0-9_]` become `_`,
//!   a leading digit gets `key_`, a single leading `_` gets `key`.
//!
//! With the convention off (the default) names are kept as sent, and only
//! the `_bucket`, `_sum`, `_count` suffixes of histograms and summaries
//! are added.

/// What a metric is, for its suffixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Gauge,
    /// A monotonic sum: `_total`.
    Counter,
    /// A non-monotonic sum, a histogram or a summary: no suffix of its own.
    Other,
}

/// The unit word of a UCUM unit as the convention spells it; an unknown
/// unit is kept as written.
fn unit_word(unit: &str) -> &str {
    match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "%" => "percent",
        "1" => "",
        other => other,
    }
}

/// The word of a unit after `/`.
fn per_unit_word(unit: &str) -> &str {
    match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => other,
    }
}

/// The words of `s`: its runs of letters and digits.
fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// `name` of `unit` as the convention names the metric.
pub fn metric_name(name: &str, unit: &str, shape: Shape) -> String {
    let mut tokens: Vec<&str> = words(name).collect();
    // `{packets}/s`: the braces' annotation is no unit.
    let unit = strip_annotations(unit);
    let (main, per) = match unit.split_once('/') {
        Some((m, p)) => (m.trim(), p.trim()),
        None => (unit.trim(), ""),
    };
    let add = |tokens: &mut Vec<&str>, word: &'static str| {
        if !tokens.contains(&word) {
            tokens.push(word);
        }
    };
    let main_words: Vec<&str> = words(unit_word(main)).collect();
    if !main_words.is_empty() && !contains_run(&tokens, &main_words) {
        tokens.extend(main_words);
    }
    let per_words: Vec<&str> = words(per_unit_word(per)).collect();
    if !per_words.is_empty() {
        let mut run = vec!["per"];
        run.extend(&per_words);
        if !contains_run(&tokens, &run) {
            tokens.extend(run);
        }
    }
    match shape {
        Shape::Counter => {
            tokens.retain(|t| *t != "total");
            tokens.push("total");
        }
        Shape::Gauge if unit.trim() == "1" => add(&mut tokens, "ratio"),
        _ => {}
    }
    let mut out = tokens.join("_");
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// Whether `run` appears in `tokens`, word for word.
fn contains_run(tokens: &[&str], run: &[&str]) -> bool {
    tokens.windows(run.len()).any(|w| w == run)
}

/// `unit` without its `{…}` annotations.
fn strip_annotations(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    let mut depth = 0u32;
    for c in unit.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// An attribute key as a Prometheus label name.
pub fn label_name(key: &str) -> String {
    let mut out: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "key_");
    } else if out.starts_with('_') && !out.starts_with("__") {
        out.insert_str(0, "key");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_as_the_convention_builds_them() {
        let cases = [
            (
                "http.server.duration",
                "ms",
                Shape::Other,
                "http_server_duration_milliseconds",
            ),
            (
                "system.network.io",
                "By",
                Shape::Counter,
                "system_network_io_bytes_total",
            ),
            ("requests", "{request}", Shape::Counter, "requests_total"),
            (
                "requests.total.count",
                "1",
                Shape::Counter,
                "requests_count_total",
            ),
            (
                "cpu.utilization",
                "1",
                Shape::Gauge,
                "cpu_utilization_ratio",
            ),
            (
                "throughput",
                "By/s",
                Shape::Gauge,
                "throughput_bytes_per_second",
            ),
            ("latency_seconds", "s", Shape::Other, "latency_seconds"),
            ("queue", "", Shape::Gauge, "queue"),
            ("2xx.responses", "", Shape::Counter, "_2xx_responses_total"),
            ("mem", "%", Shape::Gauge, "mem_percent"),
            ("odd", "things", Shape::Gauge, "odd_things"),
        ];
        for (name, unit, shape, want) in cases {
            assert_eq!(metric_name(name, unit, shape), want, "{name} {unit}");
        }
    }

    #[test]
    fn label_names_as_the_convention_builds_them() {
        assert_eq!(label_name("http.method"), "http_method");
        assert_eq!(label_name("1st"), "key_1st");
        assert_eq!(label_name("_private"), "key_private");
        assert_eq!(label_name("__reserved"), "__reserved");
        assert_eq!(label_name("ok_name"), "ok_name");
        assert_eq!(label_name("ünï"), "key_n_");
    }
}
