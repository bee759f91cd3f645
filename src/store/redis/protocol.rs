//! Every code the Rust side and `sluice.lua` exchange, by name: the
//! operations a call names, the algorithm numbers, how a receipt is
//! settled, and the codes read back from the script's answers.
//!
//! The script's header defines the same names with the same values (its
//! block between `-- protocol:` and `-- end of protocol`); the test below
//! reads `sluice.lua` and fails when the two tables differ, in either
//! direction. What each slot of a call or an answer holds is documented in
//! the script's header.

/// Declares the constants, and the table of their names and values that
/// the test compares with the script's (so that no constant can be left
/// out of the comparison).
macro_rules! protocol {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $value:expr;)*) => {
        $($(#[$doc])* pub const $name: $ty = $value;)*

        /// Every constant: its name, and its value as Lua writes it.
        #[cfg(test)]
        fn table() -> Vec<(&'static str, String)> {
            vec![$((stringify!($name), lua_literal(&$name))),*]
        }
    };
}

protocol! {
    /// `ARGV[1]`: one request's admission, all or nothing.
    OP_ADMIT: &str = "admit";
    /// What an admission would decide, taking nothing.
    OP_PEEK: &str = "peek";
    /// Takes every limit's cost unconditionally.
    OP_SPEND: &str = "spend";
    /// Settles receipts.
    OP_SETTLE: &str = "settle";
    /// Claims a queued permit.
    OP_CLAIM: &str = "claim";
    /// Several admissions in one call.
    OP_BATCH: &str = "batch";
    /// Hybrid mode's strikes, counted since the last sync.
    OP_STRIKE: &str = "strike";
    /// Hybrid mode's deltas, and the shared buckets' states.
    OP_SYNC: &str = "sync";

    /// A limit's algorithm, first of its fields.
    ALG_TOKEN_BUCKET: u64 = 1;
    ALG_FIXED_WINDOW: u64 = 2;
    ALG_SLIDING_WINDOW: u64 = 3;
    ALG_CONCURRENCY: u64 = 4;
    ALG_LEAKY_BUCKET: u64 = 5;
    ALG_SLIDING_LOG: u64 = 6;

    /// How a receipt is settled: its admission units given back.
    SETTLE_GIVE_BACK: u64 = 1;
    /// More units charged.
    SETTLE_CHARGE: u64 = 2;
    /// A lease returned (the units slot names it).
    SETTLE_RETURN_LEASE: u64 = 3;
    /// A reservation cancelled while its instant is ahead, else given back.
    SETTLE_CANCEL_RESERVATION: u64 = 4;
    /// A permit queue left (the units slot names the ticket).
    SETTLE_LEAVE_QUEUE: u64 = 5;

    /// An admission's outcome (the answer's second integer): refused.
    OUTCOME_LIMITED: i64 = 0;
    /// Every enforced limit admitted.
    OUTCOME_ADMITTED: i64 = 1;
    /// A ban in force refused it before any bucket was asked.
    OUTCOME_BANNED: i64 = 3;

    /// One limit's decision (first of its five integers): refused.
    DECISION_DENY: i64 = 0;
    /// Admitted now.
    DECISION_ALLOW: i64 = 1;
    /// Admitted after a wait (reserved), or queued for a permit.
    DECISION_HOLD: i64 = 2;
    /// A refusal's `retry_after` when no wait would help.
    RETRY_NEVER: i64 = -1;

    /// A claim's answer: the ticket lapsed, the permit will never come.
    CLAIM_NEVER: i64 = 0;
    /// The permit is the ticket's now.
    CLAIM_CLAIMED: i64 = 1;
    /// Not yet: others are ahead in the queue.
    CLAIM_NOT_YET: i64 = 2;
}

/// How Lua writes `value` (a number as is, a text quoted).
#[cfg(test)]
fn lua_literal(value: &dyn std::fmt::Debug) -> String {
    format!("{value:?}").replace('"', "'")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script's protocol block: its `local NAME = value` lines, in
    /// order.
    fn lua_table() -> Vec<(String, String)> {
        let source = super::super::script::SOURCE;
        let start = source
            .find("\n-- protocol:")
            .expect("sluice.lua has a protocol block");
        let end = start
            + source[start..]
                .find("\n-- end of protocol")
                .expect("the protocol block ends");
        source[start..end]
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with("--"))
            .map(|line| {
                let definition = line
                    .strip_prefix("local ")
                    .and_then(|rest| rest.split_once(" = "))
                    .unwrap_or_else(|| panic!("not a protocol constant: {line:?}"));
                let value = definition.1.split(" --").next().unwrap_or_default();
                (definition.0.to_owned(), value.trim().to_owned())
            })
            .collect()
    }

    #[test]
    fn the_script_defines_the_same_protocol_constants() {
        let rust = table();
        let lua = lua_table();
        for (name, value) in &rust {
            let found = lua.iter().find(|(lua_name, _)| lua_name == name);
            assert_eq!(
                found.map(|(_, lua_value)| lua_value),
                Some(value),
                "{name}: sluice.lua's protocol block must define it as {value}"
            );
        }
        for (name, value) in &lua {
            assert!(
                rust.iter().any(|(rust_name, _)| rust_name == name),
                "sluice.lua defines {name} = {value}, which protocol.rs does not"
            );
        }
        let mut names: Vec<_> = lua.iter().map(|(name, _)| name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), lua.len(), "a name defined twice in sluice.lua");
    }

    #[test]
    fn codes_of_one_kind_are_distinct() {
        let groups = [[
            OP_ADMIT, OP_PEEK, OP_SPEND, OP_SETTLE, OP_CLAIM, OP_BATCH, OP_STRIKE, OP_SYNC,
        ]
        .map(str::to_owned)];
        let numbers: [&[i64]; 5] = [
            &[
                ALG_TOKEN_BUCKET,
                ALG_FIXED_WINDOW,
                ALG_SLIDING_WINDOW,
                ALG_CONCURRENCY,
                ALG_LEAKY_BUCKET,
                ALG_SLIDING_LOG,
            ]
            .map(|code| code as i64),
            &[
                SETTLE_GIVE_BACK,
                SETTLE_CHARGE,
                SETTLE_RETURN_LEASE,
                SETTLE_CANCEL_RESERVATION,
                SETTLE_LEAVE_QUEUE,
            ]
            .map(|code| code as i64),
            &[OUTCOME_LIMITED, OUTCOME_ADMITTED, OUTCOME_BANNED],
            &[DECISION_DENY, DECISION_ALLOW, DECISION_HOLD],
            &[CLAIM_NEVER, CLAIM_CLAIMED, CLAIM_NOT_YET],
        ];
        for group in groups {
            let mut sorted = group.to_vec();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), group.len(), "{group:?}");
        }
        for group in numbers {
            let mut sorted = group.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), group.len(), "{group:?}");
        }
    }
}
