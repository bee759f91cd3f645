//! `ban`: callers limited too often are refused for a while.

use std::time::Duration;

use toml::Spanned;

use super::raw::{Located, RawBan, RawRule, Start};
use super::rules::RuleContext;
use super::units::parse_duration;
use super::validate::Validator;
use super::BanConfig;

impl Validator<'_> {
    /// `ban = { after = N, within = "1m", for = "10m" }`.
    pub(super) fn ban(
        &mut self,
        rule: &RuleContext,
        raw: &Located<RawBan>,
        raw_rule: &RawRule,
    ) -> Option<BanConfig> {
        let index = rule.index;
        let path = |key: &str| format!("rule[{index}].ban.{key}");
        let at = raw.start_or(rule.at);
        let mut valid = true;
        if let Some(shadow) = raw_rule.shadow.as_ref().filter(|s| *s.get_ref()) {
            let (line, _) = self.source.position(shadow.span().start);
            self.error(
                at,
                &format!("rule[{index}].ban"),
                format!(
                    "a shadow rule (line {line}) never limits anyone, so it would never ban; \
                     remove ban, or set shadow = false"
                ),
            );
            valid = false;
        }
        if rule.algorithm == Some(super::AlgorithmKind::Adaptive) {
            self.error(
                at,
                &format!("rule[{index}].ban"),
                "an adaptive rule sheds what the upstream cannot take, which is not the caller's \
                 fault, so it bans nobody; remove ban, or ban with a rate rule",
            );
            valid = false;
        }
        let ban = &raw.value;
        let present = [
            ("after", ban.after.is_some()),
            ("within", ban.within.is_some()),
            ("for", ban.duration.is_some()),
        ];
        let example = "ban = { after = 20, within = \"1m\", for = \"10m\" } bans a key \
                       limited 20 times within a minute for 10 minutes";
        valid &= self.require(at, &format!("rule[{index}].ban"), &present, example);
        let after = ban.after.as_ref().and_then(|field| {
            let value = *field.get_ref();
            if value >= 1 {
                u64::try_from(value).ok()
            } else {
                self.invalid(
                    field.span().start,
                    &path("after"),
                    format!(
                        "{value} is out of range: must be at least 1 (how many limited answers \
                         within `within` start a ban)"
                    ),
                )
            }
        });
        let within = ban
            .within
            .as_ref()
            .and_then(|field| self.positive_duration(field, &path("within"), ""));
        let duration = ban
            .duration
            .as_ref()
            .and_then(|field| self.positive_duration(field, &path("for"), ""));
        if !valid {
            return None;
        }
        Some(BanConfig {
            after: after?,
            within: within?,
            duration: duration?,
        })
    }

    /// A duration with no default that must be longer than zero; `default`
    /// follows the message when there is one.
    pub(super) fn positive_duration(
        &mut self,
        field: &Spanned<String>,
        path: &str,
        default: &str,
    ) -> Option<Duration> {
        let parsed = parse_duration(field.get_ref()).and_then(|duration| match duration {
            _ if duration.is_zero() => Err(format!("must be longer than zero{default}")),
            _ => Ok(duration),
        });
        self.ok(field.span().start, path, parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    #[test]
    fn ban_needs_after_within_and_for() {
        let config = valid(&rule_a(
            "rate = \"1/s\"\nban = { after = 20, within = \"1m\", for = \"10m\" }\n",
        ));
        assert_eq!(
            config.rules[0].ban,
            Some(BanConfig {
                after: 20,
                within: Duration::from_secs(60),
                duration: Duration::from_secs(600),
            })
        );
        let config = valid(&rule_a(
            "rate = \"1/s\"\nban.after = 1\nban.within = \"1s\"\nban.for = \"1h\"\n",
        ));
        assert_eq!(config.rules[0].ban.map(|b| b.after), Some(1));
        assert_eq!(
            errors(&rule_a("rate = \"1/s\"\nban = { after = 0, within = \"0s\" }\n")),
            vec![
                "test.toml:6:7: rule[0].ban: needs for: ban = { after = 20, within = \"1m\", for = \"10m\" } bans a key limited 20 times within a minute for 10 minutes",
                "test.toml:6:17: rule[0].ban.after: 0 is out of range: must be at least 1 (how many limited answers within `within` start a ban)",
                "test.toml:6:29: rule[0].ban.within: must be longer than zero",
            ]
        );
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\nshadow = true\n[rule.ban]\nafter = 2\nwithin = \"1m\"\nfor = \"5m\"\n")),
            "test.toml:7:1: rule[0].ban: a shadow rule (line 6) never limits anyone, so it would never ban; remove ban, or set shadow = false"
        );
    }
}
