//! Deferred charging: `charge` (units taken after the response, by upstream
//! time or a cost the upstream reports) and `refund_on` (the admission cost
//! given back when the exchange failed).

use super::raw::RawRule;
use super::validate::Validator;
use super::{AlgorithmKind, Charge, RefundOn};
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

impl Validator<'_> {
    /// `charge`: `"elapsed_ms"` or `"header:<name>"`, on an algorithm whose
    /// balance can go below zero.
    pub(super) fn charge(
        &mut self,
        index: usize,
        raw: &RawRule,
        algorithm: Option<AlgorithmKind>,
    ) -> Option<Charge> {
        let field = raw.charge.as_ref()?;
        let path = format!("rule[{index}].charge");
        let at = field.span().start;
        let charge =
            parse_charge(field.get_ref()).map_err(|message| self.error(at, &path, message));
        match algorithm {
            Some(
                AlgorithmKind::TokenBucket
                | AlgorithmKind::FixedWindow
                | AlgorithmKind::SlidingWindow,
            )
            | None => {}
            Some(kind) => {
                self.error(
                    at,
                    &path,
                    format!(
                        "a {} rule cannot carry a debt, and a deferred charge may drive the \
                         balance below zero; use algorithm = \"token_bucket\", \"fixed_window\" \
                         or \"sliding_window\"",
                        kind.name()
                    ),
                );
                return None;
            }
        }
        charge.ok()
    }

    /// `refund_on`: any of `"5xx"`, `"upstream_error"`, `"client_abort"` (a
    /// list; one string is taken as a list of one).
    pub(super) fn refund_on(
        &mut self,
        index: usize,
        raw: &RawRule,
        algorithm: Option<AlgorithmKind>,
    ) -> RefundOn {
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
                "5xx" => refund_on.server_error = true,
                "upstream_error" => refund_on.upstream_error = true,
                "client_abort" => refund_on.client_abort = true,
                other => self.error(
                    span.start,
                    &path,
                    format!(
                        "unknown refund_on \"{other}\"; allowed: \"5xx\" (the upstream answered \
                         5xx), \"upstream_error\" (connect error, timeout) and \"client_abort\" \
                         (the client left before the response began)"
                    ),
                ),
            }
        }
        refund_on
    }
}

/// `"elapsed_ms"` or `"header:<name>"`.
fn parse_charge(text: &str) -> Result<Charge, String> {
    if text == "elapsed_ms" {
        return Ok(Charge::ElapsedMs);
    }
    let Some(name) = text.strip_prefix("header:") else {
        return Err(format!(
            "unknown charge \"{text}\"; allowed: \"elapsed_ms\" (milliseconds from forwarding to \
             the end of the response body) or \"header:<name>\" (units the upstream reports in a \
             response header)"
        ));
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
    Ok(Charge::Header(name))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{errors, rule_a, valid};
    use super::*;

    #[test]
    fn charge_and_refund_on_are_read() {
        let config = valid(&rule_a(
            "rate = \"1000/s\"\ncharge = \"elapsed_ms\"\nrefund_on = [\"5xx\", \"client_abort\"]\n",
        ));
        let rule = &config.rules[0];
        assert_eq!(rule.charge, Some(Charge::ElapsedMs));
        assert_eq!(
            rule.refund_on,
            RefundOn {
                server_error: true,
                upstream_error: false,
                client_abort: true
            }
        );
        let config = valid(&rule_a(
            "algorithm = \"sliding_window\"\nrate = \"10/s\"\ncharge = \"header:X-Cost\"\nrefund_on = \"upstream_error\"\n",
        ));
        let rule = &config.rules[0];
        assert_eq!(
            rule.charge,
            Some(Charge::Header(HeaderName::from_static("x-cost")))
        );
        assert!(rule.refund_on.upstream_error && !rule.refund_on.server_error);
        let rule = &valid(&rule_a("rate = \"1/s\"\n")).rules[0];
        assert_eq!(rule.charge, None);
        assert!(rule.refund_on.is_empty());
    }

    #[test]
    fn a_bad_charge_or_refund_on_is_reported_where_written() {
        assert_eq!(
            errors(&rule_a("rate = \"1/s\"\ncharge = \"cpu\"\n")),
            ["test.toml:6:10: rule[0].charge: unknown charge \"cpu\"; allowed: \"elapsed_ms\" (milliseconds from forwarding to the end of the response body) or \"header:<name>\" (units the upstream reports in a response header)"]
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
        assert_eq!(
            errors(&rule_a("rate = \"1/s\"\nrefund_on = [\"5xx\", \"4xx\"]\n")),
            ["test.toml:6:21: rule[0].refund_on: unknown refund_on \"4xx\"; allowed: \"5xx\" (the upstream answered 5xx), \"upstream_error\" (connect error, timeout) and \"client_abort\" (the client left before the response began)"]
        );
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
