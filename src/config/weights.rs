//! A table of sources to weights, as `charge` and `reserve` write it
//! (`{ "json:/usage/prompt_tokens" = 1, "json:/usage/completion_tokens" = 4 }`):
//! each source read by its field's own parser, each weight a number of at
//! least 0, no source listed twice.

use toml::Spanned;

use super::raw::{Key, Start};
use super::validate::Validator;
use super::Weighted;

impl Validator<'_> {
    /// `entries` of the table at `at` (`path`) as weighted sources, each
    /// source read by `parse`; what a unit of a source becomes is said as
    /// `priced` ("charged", "reserved") in the weight's error. `None` when
    /// the table is empty or any entry is wrong (each reported where it is
    /// written).
    pub(super) fn weights<S: PartialEq>(
        &mut self,
        at: usize,
        path: &str,
        entries: &[(Key, Spanned<toml::Value>)],
        empty: &str,
        priced: &str,
        parse: impl Fn(&str) -> Result<S, String>,
    ) -> Option<Vec<Weighted<S>>> {
        if entries.is_empty() {
            return self.invalid(at, path, format!("lists no source: {empty}"));
        }
        let mut sources: Vec<Weighted<S>> = Vec::with_capacity(entries.len());
        let mut valid = true;
        for (key, weight) in entries {
            let entry_at = key.start_or(at);
            let entry_path = format!("{path}.\"{}\"", key.text);
            let source = self.ok(entry_at, &entry_path, parse(&key.text));
            let parsed = number(weight.get_ref()).filter(|w| w.is_finite() && *w >= 0.0);
            if parsed.is_none() {
                self.error(
                    weight.span().start,
                    &entry_path,
                    format!(
                        "the weight {} is not a number of at least 0: each unit the source \
                         reports is {priced} this many times (1 as reported, 4 for output \
                         tokens priced four times as high, 0.5 for half)",
                        weight.get_ref()
                    ),
                );
            }
            let (Some(source), Some(weight)) = (source, parsed) else {
                valid = false;
                continue;
            };
            if sources.iter().any(|listed| listed.source == source) {
                self.error(
                    entry_at,
                    &entry_path,
                    "is listed twice (the same source after trimming)",
                );
                valid = false;
            }
            sources.push(Weighted { source, weight });
        }
        valid.then_some(sources)
    }
}

/// A TOML number as a float (an integer too).
pub(super) fn number(value: &toml::Value) -> Option<f64> {
    value.as_float().or(value.as_integer().map(|n| n as f64))
}
