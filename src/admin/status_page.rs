//! `GET /`: the status page, for a person. The server renders it whole from
//! the same snapshot `/admin/status` answers ([`super::status::snapshot`]),
//! so it reads complete with scripts off (and in a screenshot); where
//! scripts run, the page's inline script polls `/admin/status` every 2 s
//! and redraws the same elements in place. No external asset: the style
//! and the script are in the page (`status.html`), which a Content
//! Security Policy holds to that.
//!
//! Rule names come from the config and key texts from clients (a key is
//! whatever a caller put in a header): every one is HTML-escaped here, and
//! the script only ever sets text, never markup.

use std::fmt::Write as _;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, X_CONTENT_TYPE_OPTIONS};
use http::{HeaderValue, StatusCode};
use serde_json::Value;

use super::{respond, Admin, Answer};

/// The page, with `{{name}}` slots the server fills.
const TEMPLATE: &str = include_str!("status.html");

static TEXT_HTML: HeaderValue = HeaderValue::from_static("text/html; charset=utf-8");
/// Inline style and script only; the script may fetch from this listener.
/// Should an escape ever be missed, injected markup can load nothing and
/// send nothing elsewhere.
static POLICY: HeaderValue = HeaderValue::from_static(
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'",
);

/// Characters of a key shown before it is cut (the script cuts the same).
const KEY_CHARS: usize = 120;

/// `GET /` (and `HEAD /`).
pub(super) fn page(admin: &Admin) -> Answer {
    let snapshot = super::status::snapshot(admin);
    let html = render(&snapshot, std::time::SystemTime::now());
    let mut response = respond(StatusCode::OK, &TEXT_HTML, Bytes::from(html));
    let headers = response.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(CONTENT_SECURITY_POLICY, POLICY.clone());
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// The page for `snapshot` (an `/admin/status` answer), rendered at `now`.
pub(super) fn render(snapshot: &Value, now: std::time::SystemTime) -> String {
    let str_of = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let num = |value: &Value| value.as_f64().unwrap_or_default();
    let ready = snapshot["ready"].as_bool().unwrap_or(false);
    let store = &snapshot["store"];
    let backend = str_of(&store["backend"]);
    let fallback = store["fallback_active"].as_bool().unwrap_or(false);
    let rules = list(&snapshot["rules"]);
    let keys = list(&snapshot["top_limited"]);
    let pools = list(&snapshot["upstreams"]);
    let (limited, held, busiest) = limited_of(rules);
    let config = &snapshot["config"];
    let last = &config["last_reload"];
    let (reload, reload_class) = reload_of(config);
    let started = std::time::UNIX_EPOCH
        + std::time::Duration::from_secs(snapshot["started"].as_u64().unwrap_or(0));
    fill(TEMPLATE, |slot, out| match slot {
        "version" => escape_into(out, &str_of(&snapshot["version"])),
        "ready_class" => out.push_str(if ready { "ok" } else { "bad" }),
        "ready" => out.push_str(if ready { "ready" } else { "draining" }),
        "store_class" => out.push_str(if fallback { "warn" } else { "ok" }),
        "store_pill" => {
            escape_into(out, &backend);
            if fallback {
                out.push_str(": fallback");
            }
        }
        "uptime" => out.push_str(&uptime(snapshot["uptime_secs"].as_u64().unwrap_or(0))),
        "started" => out.push_str(&httpdate::fmt_http_date(started)),
        "window" => out.push_str(&num(&snapshot["window_secs"]).floor().to_string()),
        "limited_class" => out.push_str(if limited > 0.0 { "bad" } else { "" }),
        "total_limited" => out.push_str(&rate(limited)),
        "busiest" => {
            match busiest {
                Some((name, _)) => {
                    out.push_str("most by ");
                    escape_into(out, name);
                }
                None => out.push_str("no rule is limiting"),
            }
            let _ = write!(out, " \u{b7} {held} held");
        }
        "store" => escape_into(out, &backend),
        "store_sub_class" => out.push_str(if fallback { "bad" } else { "" }),
        "store_sub" => out.push_str(store_text(&backend, fallback)),
        "connections" | "protocols" => connections(out, slot, &snapshot["connections"]),
        "generation" => out.push_str(&config["generation"].as_u64().unwrap_or(1).to_string()),
        "reload_class" => out.push_str(reload_class),
        "reload" => escape_into(out, &reload),
        "reload_error" => escape_into(out, last["error"].as_str().unwrap_or_default()),
        "rules" if rules.is_empty() => empty_row(out, 9, "No rules: every request passes."),
        "rules" => rules.iter().for_each(|rule| rule_row(out, rule)),
        "servers" => {
            let before = out.len();
            pools.iter().for_each(|pool| server_rows(out, pool));
            if out.len() == before {
                empty_row(
                    out,
                    6,
                    "No pool has a server yet: its names have not resolved.",
                );
            }
        }
        "keys" if keys.is_empty() => {
            empty_row(out, 3, "No key was limited in the last minute.");
        }
        "keys" => keys.iter().for_each(|key| key_row(out, key)),
        "generated" => out.push_str(&httpdate::fmt_http_date(now)),
        _ => {}
    })
}

/// Limited requests of all `rules` per second (a request two rules refuse
/// counts in both, which is rare and still "how much is refused"),
/// requests held, and the rule refusing most; the first such rule on a
/// tie, as the script picks.
fn limited_of(rules: &[Value]) -> (f64, i64, Option<(&str, f64)>) {
    let (mut limited, mut held) = (0.0, 0);
    let mut busiest: Option<(&str, f64)> = None;
    for rule in rules {
        let rule_limited = rule["rates_per_sec"]["limited"]
            .as_f64()
            .unwrap_or_default();
        limited += rule_limited;
        held += rule["queue_depth"].as_i64().unwrap_or(0);
        if rule_limited > 0.0 && busiest.is_none_or(|(_, most)| rule_limited > most) {
            busiest = Some((rule["name"].as_str().unwrap_or_default(), rule_limited));
        }
    }
    (limited, held, busiest)
}

/// The last reload as the page says it, and its class.
fn reload_of(config: &Value) -> (String, &'static str) {
    let last = &config["last_reload"];
    if last.is_object() {
        let result = last["result"].as_str().unwrap_or_default();
        let text = format!(
            "last reload {result}, {} ({})",
            ago(last["ago_secs"].as_u64().unwrap_or(0)),
            last["trigger"].as_str().unwrap_or_default()
        );
        (text, if result == "ok" { "" } else { "bad" })
    } else if config["reloadable"].as_bool().unwrap_or(false) {
        ("not reloaded since start".to_owned(), "")
    } else {
        ("started without a config file".to_owned(), "")
    }
}

/// One rule: its name and limits, its rates, requests held, and a
/// sparkline of the last readings (admitted green, limited red).
fn rule_row(out: &mut String, rule: &Value) {
    let rates = &rule["rates_per_sec"];
    out.push_str("<tr data-rule=\"");
    escape_into(out, rule["name"].as_str().unwrap_or_default());
    out.push_str("\"><td class=\"rule\"><div class=\"rname\">");
    escape_into(out, rule["name"].as_str().unwrap_or_default());
    if rule["shadow"].as_bool().unwrap_or(false) {
        out.push_str("<span class=\"tag\">shadow</span>");
    }
    if rule["delay"].as_bool().unwrap_or(false) {
        out.push_str("<span class=\"tag\">delay</span>");
    }
    out.push_str("</div><div class=\"rmeta\">");
    escape_into(out, rule["limits"].as_str().unwrap_or_default());
    out.push_str("</div></td>");
    for (label, key, tone) in [
        ("Admitted/s", "admitted", "ok"),
        ("Limited/s", "limited", "bad"),
        ("Delayed/s", "delayed", "warn"),
        ("Shadow-limited/s", "shadow_limited", "warn"),
    ] {
        let value = rates[key].as_f64().unwrap_or_default();
        num_cell(out, label, key, value > 0.0, tone, &rate(value));
    }
    // As the script writes them: a dash for a rule that neither charges
    // nor reserves.
    match rates["charged"].as_f64() {
        Some(value) => num_cell(out, "Charged/s", "charged", value > 0.0, "ok", &rate(value)),
        None => num_cell(out, "Charged/s", "charged", false, "zero", "\u{2014}"),
    }
    match rule["reserved"].as_i64() {
        Some(units) => num_cell(
            out,
            "Reserved",
            "reserved",
            units > 0,
            "warn",
            &units.to_string(),
        ),
        None => num_cell(out, "Reserved", "reserved", false, "zero", "\u{2014}"),
    }
    let depth = rule["queue_depth"].as_i64().unwrap_or(0);
    num_cell(
        out,
        "Held",
        "queue_depth",
        depth > 0,
        "warn",
        &depth.to_string(),
    );
    out.push_str("<td data-label=\"Last 10 s\">");
    spark(out, &rule["history"]);
    out.push_str("</td></tr>");
}

fn num_cell(out: &mut String, label: &str, key: &str, nonzero: bool, tone: &str, shown: &str) {
    let tone = if nonzero { tone } else { "zero" };
    let _ = write!(
        out,
        "<td class=\"num {tone}\" data-label=\"{label}\" data-k=\"{key}\">{shown}</td>"
    );
}

/// The sparkline as the script draws it: both lines on one scale.
fn spark(out: &mut String, history: &Value) {
    let series = |name: &str| -> Vec<f64> {
        history[name]
            .as_array()
            .map(|values| values.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    let (admitted, limited) = (series("admitted"), series("limited"));
    let top = admitted
        .iter()
        .chain(&limited)
        .fold(0.0_f64, |top, &value| top.max(value));
    out.push_str(
        "<svg class=\"spark\" viewBox=\"0 0 100 28\" preserveAspectRatio=\"none\" \
         aria-hidden=\"true\">",
    );
    for (class, values) in [("a", &admitted), ("l", &limited)] {
        let _ = write!(out, "<polyline class=\"{class}\" points=\"");
        if values.len() >= 2 {
            let last = (values.len() - 1) as f64;
            for (index, value) in values.iter().enumerate() {
                let x = index as f64 * 100.0 / last;
                let y = 26.0 - if top > 0.0 { value / top } else { 0.0 } * 24.0;
                let _ = write!(out, "{}{x:.1},{y:.1}", if index > 0 { " " } else { "" });
            }
        }
        out.push_str("\"/>");
    }
    out.push_str("</svg>");
}

/// One of the most limited keys: its rule, its text (cut to
/// [`KEY_CHARS`]; whole in the tooltip) and how often it was refused.
fn key_row(out: &mut String, entry: &Value) {
    out.push_str("<tr><td class=\"rname\">");
    escape_into(out, entry["rule"].as_str().unwrap_or_default());
    out.push_str("</td>");
    match entry["key"].as_str() {
        None => {
            out.push_str("<td class=\"key none\">not yet named (");
            escape_into(out, entry["key_hash"].as_str().unwrap_or_default());
            out.push_str(")</td>");
        }
        Some("") => out.push_str("<td class=\"key none\">everyone (global key)</td>"),
        Some(key) => {
            out.push_str("<td class=\"key\" title=\"");
            escape_into(out, key);
            out.push_str("\">");
            escape_into(out, &clip(key));
            out.push_str("</td>");
        }
    }
    let _ = write!(
        out,
        "<td class=\"num\">{}</td></tr>",
        entry["count"].as_u64().unwrap_or(0)
    );
}

/// Each server of `pool`: its pool, URL (its address as the title), state
/// and why, in flight, requests and failures.
fn server_rows(out: &mut String, pool: &Value) {
    let panic = pool["panic"].as_bool().unwrap_or(false);
    for server in list(&pool["servers"]) {
        let state_in = server["state"] == "in";
        out.push_str("<tr><td class=\"rname\">");
        escape_into(out, pool["name"].as_str().unwrap_or_default());
        out.push_str("</td><td class=\"key\" title=\"");
        escape_into(out, server["address"].as_str().unwrap_or_default());
        out.push_str("\">");
        escape_into(out, server["url"].as_str().unwrap_or_default());
        out.push_str(if state_in {
            "</td><td class=\"ok\">"
        } else {
            "</td><td class=\"bad\">"
        });
        escape_into(out, &server_state(server, panic));
        let failures = server["failures"].as_u64().unwrap_or(0);
        let _ = write!(
            out,
            "</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num {}\">{failures}</td></tr>",
            server["in_flight"].as_u64().unwrap_or(0),
            server["requests"].as_u64().unwrap_or(0),
            if failures > 0 { "warn" } else { "zero" },
        );
    }
}

/// A server's state in words (the script's `serverState`).
fn server_state(server: &Value, panic: bool) -> String {
    if server["state"] == "in" {
        return if panic { "in (pool in panic)" } else { "in" }.to_owned();
    }
    let why: Vec<String> = list(&server["out_because"])
        .iter()
        .map(|reason| {
            if reason["reason"] == "ejected" {
                format!(
                    "ejected, {} s left",
                    reason["remaining_secs"].as_u64().unwrap_or(0)
                )
            } else {
                "failing checks".to_owned()
            }
        })
        .collect();
    let panic = if panic {
        " (pool in panic: still sent to)"
    } else {
        ""
    };
    format!("out: {}{panic}", why.join(", "))
}

/// An array's items (none when it is not one).
fn list(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

fn empty_row(out: &mut String, columns: usize, text: &str) {
    let _ = write!(
        out,
        "<tr><td class=\"empty\" colspan=\"{columns}\">{text}</td></tr>"
    );
}

/// The template with each `{{name}}` slot replaced by what `slot` writes,
/// in one pass (so text written into one slot is never read as another).
fn fill(template: &str, mut slot: impl FnMut(&str, &mut String)) -> String {
    let mut out = String::with_capacity(template.len() + 4096);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(after.len());
        if name_len == 0 || !after[name_len..].starts_with("}}") {
            out.push_str(&rest[..start + 2]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..start]);
        slot(&after[..name_len], &mut out);
        rest = &after[name_len + 2..];
    }
    out.push_str(rest);
    out
}

/// Writes `text` HTML-escaped, for element content and quoted attributes.
fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// At most [`KEY_CHARS`] characters of `key`, with an ellipsis when cut.
fn clip(key: &str) -> String {
    // The script counts UTF-16 units; a key of other than ASCII may be cut
    // a few characters apart by the two, which nobody will notice.
    match key.char_indices().nth(KEY_CHARS) {
        Some((at, _)) => format!("{}\u{2026}", &key[..at]),
        None => key.to_owned(),
    }
}

/// A rate as the page shows it (the script's `toFixed(1)`).
fn rate(value: f64) -> String {
    format!("{value:.1}")
}

/// Wording of the store's state (the script's `storeText`).
fn store_text(backend: &str, fallback: bool) -> &'static str {
    if fallback {
        "unreachable: limiting in memory (fallback)"
    } else if backend == "memory" {
        "buckets in this process"
    } else {
        "shared with the other instances"
    }
}

/// The connections card: all open (`connections`), and by protocol
/// (`protocols`), as the script writes them.
fn connections(out: &mut String, slot: &str, open: &Value) {
    let [http1, h2, h3] = ["http1", "h2", "h3"].map(|p| open[p].as_i64().unwrap_or(0));
    let _ = match slot {
        "connections" => write!(out, "{}", http1 + h2 + h3),
        _ => write!(
            out,
            "HTTP/1.1 {http1} \u{b7} HTTP/2 {h2} \u{b7} HTTP/3 {h3}"
        ),
    };
}

/// `3d 4h`, `5h 6m`, `7m 8s`, `9s` (the script's `uptime`).
fn uptime(seconds: u64) -> String {
    let (days, hours, minutes) = (
        seconds / 86_400,
        seconds % 86_400 / 3600,
        seconds % 3600 / 60,
    );
    if days > 0 {
        format!("{days}d {hours}h")
    } else if hours > 0 {
        format!("{hours}h {minutes}m")
    } else if minutes > 0 {
        format!("{minutes}m {}s", seconds % 60)
    } else {
        format!("{seconds}s")
    }
}

/// `12 s ago`, `3m 4s ago` (the script's `ago`).
fn ago(seconds: u64) -> String {
    if seconds < 60 {
        format!("{seconds} s ago")
    } else {
        format!("{} ago", uptime(seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_text_is_escaped() {
        let mut out = String::new();
        escape_into(&mut out, "<script>alert('x')</script> & \"q\"");
        assert_eq!(
            out,
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }

    #[test]
    fn slots_are_filled_once_and_text_written_into_them_is_not_read_again() {
        let filled = fill("a {{x}} b {{y}} {c} {{ z }}", |slot, out| match slot {
            "x" => out.push_str("{{y}}"),
            "y" => out.push('Y'),
            _ => {}
        });
        assert_eq!(filled, "a {{y}} b Y {c} {{ z }}");
    }

    #[test]
    fn long_keys_are_cut() {
        let long = "k".repeat(KEY_CHARS + 5);
        assert_eq!(clip(&long).chars().count(), KEY_CHARS + 1);
        assert_eq!(clip("short"), "short");
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(uptime(9), "9s");
        assert_eq!(uptime(68), "1m 8s");
        assert_eq!(uptime(3 * 3600 + 120), "3h 2m");
        assert_eq!(uptime(2 * 86_400 + 3600), "2d 1h");
        assert_eq!(ago(12), "12 s ago");
    }
}
