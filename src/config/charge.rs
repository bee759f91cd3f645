//! Deferred charging: `charge` (units taken after the response: upstream
//! time, a cost the upstream reports in a header or trailer, a number in
//! the response body, or a weighted sum of these), `charge_missing` (what a
//! value that never arrives costs) and `refund_on` (the admission cost
//! given back when the exchange ended so). See docs/charging.md.

use super::raw::{RawCharge, RawRule, Start};
use super::rules::RuleContext;
use super::validate::Validator;
use super::{AlgorithmKind, Charge, ChargeSource, MissingCharge, RefundOn, Weighted};
use crate::body_scan::{Pointer, MAX_POINTERS};
use http::HeaderName;

/// Response fields sluice cannot strip without breaking the exchange: a
/// cost reported in one would change how the response is framed or routed.
const UNSTRIPPABLE: [&str; 8] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "trailer",
    "te",
    "content-type",
];

/// What `charge` accepts, for its error message.
const CHARGE_ALLOWED: &str = "allowed: \"elapsed_ms\" (milliseconds from forwarding to the \
     end of the response body), \"request_bytes\" or \"response_bytes\" (the bytes of the \
     request or response body), \"header:<name>\" (units the upstream reports in a response \
     header or trailer) or \"json:<pointer>\" (a number in the response body, such as \
     \"json:/usage/total_tokens\")";

/// What `refund_on` accepts, for its error message.
const REFUND_ON_ALLOWED: &str = "allowed: a status class (\"2xx\" … \"5xx\") or code (\"404\"), \
     judged by the status the client got, \"upstream_error\" (connect error, timeout) and \
     \"client_abort\" (the client left before the response began)";

impl Validator<'_> {
    /// `charge` and `charge_missing`: sources (weighted when a table), on an
    /// algorithm whose balance can go below zero.
    pub(super) fn charge(&mut self, rule: &RuleContext, raw: &RawRule) -> Option<Charge> {
        let index = rule.index;
        let missing_path = format!("rule[{index}].charge_missing");
        let Some(field) = raw.charge.as_ref() else {
            if let Some(missing) = &raw.charge_missing {
                self.error(
                    missing.span().start,
                    &missing_path,
                    "charge_missing is what a charge costs when its value never arrives, and \
                     this rule has no charge; add one, such as charge = \"json:/usage/total_tokens\"",
                );
            }
            return None;
        };
        let path = format!("rule[{index}].charge");
        let at = field.start_or(rule.at);
        let (sources, valid) = self.charge_sources(at, &path, &field.value);
        let missing = self.charge_missing(raw, &sources, &missing_path);
        if let Some(kind) = rule.algorithm.filter(|kind| !kind.settles()) {
            return self.invalid(
                at,
                &path,
                format!(
                    "a {} rule cannot carry a debt, and a deferred charge may drive the balance \
                     below zero; use algorithm = \"token_bucket\", \"fixed_window\" or \
                     \"sliding_window\"",
                    kind.name()
                ),
            );
        }
        (valid && !sources.is_empty()).then_some(Charge { sources, missing })
    }

    /// A charge's sources (`valid`: each reads, and few enough read the
    /// response body).
    fn charge_sources(
        &mut self,
        at: usize,
        path: &str,
        value: &RawCharge,
    ) -> (Vec<Weighted>, bool) {
        let (mut sources, mut valid) = (Vec::new(), true);
        match value {
            RawCharge::One(text) => match self.ok(at, path, parse_source(text)) {
                Some(source) => sources.push(Weighted {
                    source,
                    weight: 1.0,
                }),
                None => valid = false,
            },
            RawCharge::Table(entries) => {
                let empty = "write charge = { \"json:/usage/prompt_tokens\" = 1, \
                             \"json:/usage/completion_tokens\" = 4 }, or one source as a string";
                match self.weights(at, path, entries, empty, "charged", parse_source) {
                    Some(weights) => sources = weights,
                    None => valid = false,
                }
            }
        }
        let pointers = sources
            .iter()
            .filter(|weighted| matches!(weighted.source, ChargeSource::Json(_)))
            .count();
        if pointers > MAX_POINTERS {
            self.error(
                at,
                path,
                format!(
                    "reads {pointers} json: sources; a rule reads at most {MAX_POINTERS} values \
                     from a response body"
                ),
            );
            valid = false;
        }
        (sources, valid)
    }

    /// `charge_missing`: what a charge costs when its value never arrives.
    fn charge_missing(
        &mut self,
        raw: &RawRule,
        sources: &[Weighted],
        missing_path: &str,
    ) -> MissingCharge {
        let units = self.int(
            raw.charge_missing.as_ref(),
            missing_path,
            0,
            0..=i64::MAX as u64,
        );
        // Nothing is free by hanging up: a reserving rule keeps its whole
        // reservation for a value that never came, unless it prices one.
        let missing = match (&raw.charge_missing, &raw.reserve) {
            (None, Some(_)) => MissingCharge::KeepReservation,
            _ => MissingCharge::Units(units),
        };
        if let Some(written) = &raw.charge_missing {
            if !sources.is_empty() && sources.iter().all(|s| s.source.is_measured()) {
                self.warn(
                    written.span().start,
                    missing_path,
                    "has no effect: sluice measures elapsed_ms, request_bytes and \
                     response_bytes itself, so their value always arrives (an empty body is 0 \
                     bytes); charge_missing prices a header: or json: value that never came",
                );
            }
        }
        missing
    }

    /// `refund_on`: any of a status class (`"4xx"`), a status code
    /// (`"404"`), `"upstream_error"`, `"client_abort"` (a list; one string
    /// is taken as a list of one).
    pub(super) fn refund_on(&mut self, rule: &RuleContext, raw: &RawRule) -> RefundOn {
        let (index, algorithm) = (rule.index, rule.algorithm);
        let mut refund_on = RefundOn::default();
        let Some(field) = &raw.refund_on else {
            return refund_on;
        };
        let path = format!("rule[{index}].refund_on");
        if algorithm.is_some_and(AlgorithmKind::counts_in_flight) {
            self.not_for_concurrency(index, field.span().start, "refund_on");
            return refund_on;
        }
        for (text, span) in field.get_ref().items(field.span()) {
            match text {
                "upstream_error" => refund_on.upstream_error = true,
                "client_abort" => refund_on.client_abort = true,
                pattern => match status_codes(pattern) {
                    Some(codes) => codes.for_each(|code| refund_on.statuses.insert(code)),
                    None => self.error(
                        span.start,
                        &path,
                        format!("unknown refund_on \"{pattern}\"; {REFUND_ON_ALLOWED}"),
                    ),
                },
            }
        }
        refund_on
    }
}

/// A status pattern's codes: `"2xx"` (a class, 1–5) or `"404"` (100–599).
fn status_codes(pattern: &str) -> Option<std::ops::Range<u16>> {
    let bytes = pattern.as_bytes();
    match bytes {
        [class @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'] => {
            let class = u16::from(class - b'0') * 100;
            Some(class..class + 100)
        }
        [b'1'..=b'5', b'0'..=b'9', b'0'..=b'9'] => {
            let code: u16 = pattern.parse().ok()?;
            Some(code..code + 1)
        }
        _ => None,
    }
}

/// `"elapsed_ms"`, `"request_bytes"`, `"response_bytes"`,
/// `"header:<name>"` or `"json:<pointer>"`.
fn parse_source(text: &str) -> Result<ChargeSource, String> {
    match text {
        "elapsed_ms" => return Ok(ChargeSource::ElapsedMs),
        "request_bytes" => return Ok(ChargeSource::RequestBytes),
        "response_bytes" => return Ok(ChargeSource::ResponseBytes),
        _ => {}
    }
    if let Some(pointer) = text.strip_prefix("json:") {
        return Pointer::parse(pointer).map(ChargeSource::Json);
    }
    let Some(name) = text.strip_prefix("header:") else {
        return Err(format!("unknown charge \"{text}\"; {CHARGE_ALLOWED}"));
    };
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
        format!("\"{name}\" is not a valid header name; write charge = \"header:x-cost-units\"")
    })?;
    if UNSTRIPPABLE.contains(&name.as_str()) {
        return Err(format!(
            "{name} describes the response itself, and sluice strips the cost header before the \
             client sees it; have the upstream report its cost in a header of its own, such as \
             charge = \"header:x-cost-units\""
        ));
    }
    Ok(ChargeSource::Header(name))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{errors, rule_a, valid};
    use super::super::StatusSet;
    use super::*;

    fn one(source: ChargeSource) -> Charge {
        Charge {
            sources: vec![Weighted {
                source,
                weight: 1.0,
            }],
            missing: MissingCharge::Units(0),
        }
    }

    fn statuses(codes: impl IntoIterator<Item = u16>) -> StatusSet {
        let mut set = StatusSet::default();
        codes.into_iter().for_each(|code| set.insert(code));
        set
    }

    #[test]
    fn charge_and_refund_on_are_read() {
        let config = valid(&rule_a(
            "rate = \"1000/s\"\ncharge = \"elapsed_ms\"\nrefund_on = [\"5xx\", \"client_abort\"]\n",
        ));
        let rule = &config.rules[0];
        assert_eq!(rule.charge, Some(one(ChargeSource::ElapsedMs)));
        assert_eq!(
            rule.refund_on,
            RefundOn {
                upstream_error: false,
                client_abort: true,
                statuses: statuses(500..600),
            }
        );
        assert_eq!(rule.refund_on.names(), ["5xx", "client_abort"]);
        let config = valid(&rule_a(
            "algorithm = \"sliding_window\"\nrate = \"10/s\"\ncharge = \"header:X-Cost\"\nrefund_on = \"upstream_error\"\n",
        ));
        let rule = &config.rules[0];
        assert_eq!(
            rule.charge,
            Some(one(ChargeSource::Header(HeaderName::from_static("x-cost"))))
        );
        assert!(rule.refund_on.upstream_error && rule.refund_on.statuses.is_empty());
        let rule = &valid(&rule_a("rate = \"1/s\"\n")).rules[0];
        assert_eq!(rule.charge, None);
        assert!(rule.refund_on.is_empty());
    }

    #[test]
    fn a_table_of_sources_weighs_each_and_charge_missing_is_read() {
        let config = valid(&rule_a(
            "rate = \"1000000/d\"\ncharge = { \"json:/usage/prompt_tokens\" = 1, \"json:/usage/completion_tokens\" = 4, \"elapsed_ms\" = 0.5 }\ncharge_missing = 2000\n",
        ));
        let charge = config.rules[0].charge.clone().expect("a charge");
        let pointer = |text: &str| ChargeSource::Json(Pointer::parse(text).unwrap());
        assert_eq!(
            charge.sources,
            [
                Weighted {
                    source: pointer("/usage/prompt_tokens"),
                    weight: 1.0
                },
                Weighted {
                    source: pointer("/usage/completion_tokens"),
                    weight: 4.0
                },
                Weighted {
                    source: ChargeSource::ElapsedMs,
                    weight: 0.5
                },
            ]
        );
        assert_eq!(charge.missing, MissingCharge::Units(2000));
        assert!(charge.charges_elapsed());
        assert_eq!(
            charge.to_string(),
            "{ \"json:/usage/prompt_tokens\" = 1, \"json:/usage/completion_tokens\" = 4, \"elapsed_ms\" = 0.5 }"
        );
        let lone = valid(&rule_a(
            "rate = \"10/s\"\ncharge = \"json:/usage/total_tokens\"\n",
        ));
        let lone = lone.rules[0].charge.clone().unwrap();
        assert_eq!(lone.to_string(), "json:/usage/total_tokens");
        assert_eq!(
            lone.missing,
            MissingCharge::Units(0),
            "charge_missing defaults to 0"
        );
        // With a reservation, a value that never arrives keeps it whole,
        // unless charge_missing says otherwise.
        let reserving = |extra: &str| {
            valid(&rule_a(&format!(
                "rate = \"10000/d\"\ncharge = \"json:/usage/total_tokens\"\nreserve = 500\n{extra}"
            )))
            .rules[0]
                .charge
                .clone()
                .unwrap()
                .missing
        };
        assert_eq!(reserving(""), MissingCharge::KeepReservation);
        assert_eq!(reserving("charge_missing = 0\n"), MissingCharge::Units(0));
        assert_eq!(reserving("charge_missing = 40\n"), MissingCharge::Units(40));
    }

    #[test]
    fn weighted_units_round_up_and_whole_weights_are_exact() {
        let weighted = |weight| Weighted {
            source: ChargeSource::ElapsedMs,
            weight,
        };
        assert_eq!(weighted(1.0).units(12.5), 13);
        assert_eq!(weighted(4.0).units(3.0), 12);
        assert_eq!(
            weighted(0.3).units(10.0),
            3,
            "not 4 from 3.0000000000000004"
        );
        assert_eq!(weighted(0.5).units(3.0), 2);
        assert_eq!(weighted(0.0).units(1e9), 0);
        assert_eq!(weighted(2.0).units(1e300), u64::MAX, "saturates");
        assert_eq!(weighted(1.0).whole_units(u64::MAX - 1), u64::MAX - 1);
        assert_eq!(weighted(3.0).whole_units(u64::MAX / 2), u64::MAX);
        assert_eq!(weighted(0.25).whole_units(5), 2);
    }

    #[test]
    fn byte_sources_are_read_alone_or_weighted() {
        let config = valid(&rule_a(
            "rate = \"10000000/d\"\ncharge = \"response_bytes\"\n",
        ));
        let charge = config.rules[0].charge.clone().expect("a charge");
        assert_eq!(charge, one(ChargeSource::ResponseBytes));
        assert_eq!(charge.to_string(), "response_bytes");
        assert!(!charge.charges_elapsed());
        let config = valid(&rule_a(
            "rate = \"10000000/d\"\ncharge = { response_bytes = 0.001, \"request_bytes\" = 2, elapsed_ms = 1 }\n",
        ));
        let charge = config.rules[0].charge.clone().expect("a charge");
        let weights: Vec<_> = charge
            .sources
            .iter()
            .map(|weighted| (weighted.source.clone(), weighted.weight))
            .collect();
        assert_eq!(
            weights,
            [
                (ChargeSource::ResponseBytes, 0.001),
                (ChargeSource::RequestBytes, 2.0),
                (ChargeSource::ElapsedMs, 1.0),
            ]
        );
        assert_eq!(
            charge.to_string(),
            "{ \"response_bytes\" = 0.001, \"request_bytes\" = 2, \"elapsed_ms\" = 1 }"
        );
        assert!(charge.charges(&ChargeSource::RequestBytes));
        assert!(ChargeSource::RequestBytes.is_measured() && ChargeSource::ElapsedMs.is_measured());
        assert!(!ChargeSource::Header(HeaderName::from_static("x-cost")).is_measured());
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn a_bad_byte_source_is_reported_where_written() {
        let lines = errors(&rule_a(
            "rate = \"1/s\"\ncharge = { response_bytes = -0.5, \"request-bytes\" = 1, \" request_bytes\" = 2, request_bytes = inf }\n",
        ));
        assert_eq!(
            lines,
            [
                "test.toml:6:29: rule[0].charge.\"response_bytes\": the weight -0.5 is not a number of at least 0: each unit the source reports is charged this many times (1 as reported, 4 for output tokens priced four times as high, 0.5 for half)".to_owned(),
                format!("test.toml:6:35: rule[0].charge.\"request-bytes\": unknown charge \"request-bytes\"; {CHARGE_ALLOWED}"),
                format!("test.toml:6:56: rule[0].charge.\" request_bytes\": unknown charge \" request_bytes\"; {CHARGE_ALLOWED}"),
                "test.toml:6:94: rule[0].charge.\"request_bytes\": the weight inf is not a number of at least 0: each unit the source reports is charged this many times (1 as reported, 4 for output tokens priced four times as high, 0.5 for half)".to_owned(),
            ]
        );
        assert_eq!(
            errors(&rule_a(
                "algorithm = \"sliding_log\"\nrate = \"10/s\"\ncharge = \"request_bytes\"\n"
            )),
            ["test.toml:7:10: rule[0].charge: a sliding_log rule cannot carry a debt, and a deferred charge may drive the balance below zero; use algorithm = \"token_bucket\", \"fixed_window\" or \"sliding_window\""]
        );
    }

    #[test]
    fn charge_missing_beside_measured_sources_only_is_a_warning() {
        let config = valid(&rule_a(
            "rate = \"1000/s\"\ncharge = { response_bytes = 1, elapsed_ms = 1 }\ncharge_missing = 5\n",
        ));
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert!(
            config.warnings[0].starts_with("test.toml:7:18: rule[0].charge_missing: has no effect"),
            "{:?}",
            config.warnings
        );
        let config = valid(&rule_a(
            "rate = \"1000/s\"\ncharge = { response_bytes = 1, \"json:/usage/total_tokens\" = 1 }\ncharge_missing = 5\n",
        ));
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn refund_on_takes_status_classes_and_codes() {
        let config = valid(&rule_a(
            "rate = \"5/15m\"\nrefund_on = [\"2xx\", \"3xx\", \"404\", \"429\"]\n",
        ));
        let refund_on = config.rules[0].refund_on;
        for (code, refunds) in [
            (200, true),
            (204, true),
            (302, true),
            (401, false),
            (404, true),
            (429, true),
            (500, false),
        ] {
            let status = http::StatusCode::from_u16(code).unwrap();
            assert_eq!(refund_on.refunds_status(status), refunds, "{code}");
        }
        assert_eq!(refund_on.names(), ["2xx", "3xx", "404", "429"]);
    }

    #[test]
    fn a_bad_charge_or_refund_on_is_reported_where_written() {
        assert_eq!(
            errors(&rule_a("rate = \"1/s\"\ncharge = \"cpu\"\n")),
            ["test.toml:6:10: rule[0].charge: unknown charge \"cpu\"; allowed: \"elapsed_ms\" (milliseconds from forwarding to the end of the response body), \"request_bytes\" or \"response_bytes\" (the bytes of the request or response body), \"header:<name>\" (units the upstream reports in a response header or trailer) or \"json:<pointer>\" (a number in the response body, such as \"json:/usage/total_tokens\")"]
        );
        assert_eq!(
            errors(&rule_a("rate = \"1/s\"\ncharge = \"header:a b\"\n")),
            ["test.toml:6:10: rule[0].charge: \"a b\" is not a valid header name; write charge = \"header:x-cost-units\""]
        );
        assert!(errors(&rule_a(
            "rate = \"1/s\"\ncharge = \"header:Content-Length\"\n"
        ))[0]
            .starts_with(
                "test.toml:6:10: rule[0].charge: content-length describes the response itself"
            ));
        let lines = errors(&rule_a(
            "rate = \"1/s\"\ncharge = \"json:usage/total_tokens\"\n",
        ));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("test.toml:6:10: rule[0].charge: ") && lines[0].contains("\"/\""),
            "{lines:?}"
        );
        for pattern in ["4xx5", "6xx", "99", "600", "2XX0", "ok"] {
            assert_eq!(
                errors(&rule_a(&format!("rate = \"1/s\"\nrefund_on = [\"5xx\", \"{pattern}\"]\n"))),
                [format!("test.toml:6:21: rule[0].refund_on: unknown refund_on \"{pattern}\"; {REFUND_ON_ALLOWED}")]
            );
        }
    }

    #[test]
    fn a_bad_weight_source_or_charge_missing_is_reported_where_written() {
        let lines = errors(&rule_a(
            "rate = \"1/s\"\ncharge = { \"json:/a\" = -1, \"json:b\" = 1, \"json:/c\" = \"x\" }\ncharge_missing = -5\n",
        ));
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].starts_with("test.toml:6:24: rule[0].charge.\"json:/a\": the weight -1 is not a number of at least 0"), "{lines:?}");
        assert!(
            lines[1].starts_with("test.toml:6:28: rule[0].charge.\"json:b\": "),
            "{lines:?}"
        );
        assert!(
            lines[2].starts_with(
                "test.toml:6:54: rule[0].charge.\"json:/c\": the weight \"x\" is not a number"
            ),
            "{lines:?}"
        );
        assert!(
            lines[3].starts_with(
                "test.toml:7:18: rule[0].charge_missing: -5 is out of range: must be at least 0"
            ),
            "{lines:?}"
        );
        assert_eq!(
            errors(&rule_a("rate = \"1/s\"\ncharge_missing = 5\n")),
            ["test.toml:6:18: rule[0].charge_missing: charge_missing is what a charge costs when its value never arrives, and this rule has no charge; add one, such as charge = \"json:/usage/total_tokens\""]
        );
        assert!(errors(&rule_a("rate = \"1/s\"\ncharge = {}\n"))[0]
            .starts_with("test.toml:6:10: rule[0].charge: lists no source"));
    }

    #[test]
    fn charge_needs_an_algorithm_that_carries_a_debt() {
        for kind in ["leaky_bucket", "sliding_log"] {
            assert_eq!(
                errors(&rule_a(&format!(
                    "algorithm = \"{kind}\"\nrate = \"10/s\"\ncharge = \"elapsed_ms\"\n"
                ))),
                [format!("test.toml:7:10: rule[0].charge: a {kind} rule cannot carry a debt, and a deferred charge may drive the balance below zero; use algorithm = \"token_bucket\", \"fixed_window\" or \"sliding_window\"")]
            );
        }
        let lines = errors(&rule_a(
            "algorithm = \"concurrency\"\ncharge = \"elapsed_ms\"\nrefund_on = [\"5xx\"]\n",
        ));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0]
            .starts_with("test.toml:6:10: rule[0].charge: a concurrency rule cannot carry a debt"));
        assert!(lines[1].starts_with("test.toml:7:13: rule[0].refund_on: concurrency counts requests in flight, so it takes no refund_on"));
    }
}
