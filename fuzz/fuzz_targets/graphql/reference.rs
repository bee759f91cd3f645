//! The reference the graphql target checks sluice's reader against: the
//! same reading (operation, type, requests) done with `apollo-parser`'s
//! tree, the way sluice read documents before it had a parser of its own.
//!
//! `apollo-parser` recovers from some syntax errors without reporting them
//! (an argument or an object field without `: value`); the reference
//! refuses those as every GraphQL server does.

use apollo_parser::cst::{self, CstNode};
use apollo_parser::{Parser, SyntaxKind, SyntaxToken};
use sluice::key::graphql::{OperationType, RECURSION_LIMIT, TOKEN_LIMIT};

/// What a request reads as: the operation's name (`None`: anonymous), its
/// type and the requests its connections take.
pub type Reading = (Option<String>, OperationType, u64);

const UNKNOWN_COUNT: u64 = 100;

/// The reading of `source` run as `operation_name`, with the `variables`
/// object (JSON text); `None` when a GraphQL server would refuse it.
pub fn read(
    source: &str,
    operation_name: Option<&str>,
    variables: Option<&str>,
) -> Option<Reading> {
    let tree = Parser::new(source)
        .recursion_limit(RECURSION_LIMIT)
        .token_limit(TOKEN_LIMIT)
        .parse();
    let within =
        tree.recursion_limit().high <= RECURSION_LIMIT && tree.token_limit().high <= TOKEN_LIMIT;
    if tree.errors().len() != 0 || !within {
        return None;
    }
    let document = tree.document();
    for node in document.syntax().descendants() {
        let complete = match node.kind() {
            SyntaxKind::ARGUMENT => cst::Argument::cast(node).is_some_and(|a| a.value().is_some()),
            SyntaxKind::OBJECT_FIELD => {
                cst::ObjectField::cast(node).is_some_and(|f| f.value().is_some())
            }
            _ => true,
        };
        if !complete {
            return None;
        }
    }

    // The operation.
    let mut chosen = None;
    let mut operations = 0;
    let mut anonymous = false;
    for definition in document.definitions() {
        let operation = match definition {
            cst::Definition::OperationDefinition(operation) => operation,
            cst::Definition::FragmentDefinition(_) => continue,
            _ => return None,
        };
        operations += 1;
        let name = operation.name().map(|name| name.text().to_string());
        anonymous |= name.is_none();
        let fits = match operation_name {
            Some(wanted) => name.as_deref() == Some(wanted),
            None => true,
        };
        if fits {
            if chosen.is_some() {
                return None;
            }
            chosen = Some((operation, name));
        }
    }
    if anonymous && operations > 1 {
        return None;
    }
    let (operation, name) = chosen?;
    let kind = match operation.operation_type() {
        None => OperationType::Query,
        Some(kind) if kind.mutation_token().is_some() => OperationType::Mutation,
        Some(kind) if kind.subscription_token().is_some() => OperationType::Subscription,
        Some(_) => OperationType::Query,
    };

    // Variables: given, else the default, else unknown.
    let given: serde_json::Map<String, serde_json::Value> = match variables {
        Some(text) => match serde_json::from_str(text).ok()? {
            serde_json::Value::Object(map) => map,
            serde_json::Value::Null => Default::default(),
            _ => return None,
        },
        None => Default::default(),
    };
    let mut defaults = std::collections::HashMap::new();
    if let Some(definitions) = operation.variable_definitions() {
        for definition in definitions.variable_definitions() {
            let Some(name) = definition.variable().and_then(|v| v.name()) else {
                continue;
            };
            if let Some(value) = definition.default_value().and_then(|d| d.value()) {
                defaults.insert(name.text().to_string(), literal(&value));
            }
        }
    }
    let variable = |name: &str| -> Option<u64> {
        match given.get(name) {
            Some(value) => json_count(value),
            None => defaults.get(name).copied().flatten(),
        }
    };

    // Fragments, by name; a name defined twice is refused.
    let mut fragments = std::collections::HashMap::new();
    let mut twice = false;
    for definition in document.definitions() {
        if let cst::Definition::FragmentDefinition(fragment) = definition {
            let name = fragment.fragment_name()?.name()?.text().to_string();
            twice |= fragments.insert(name, fragment.selection_set()).is_some();
        }
    }

    // Each fragment's total, memoized; a cycle is refused.
    let mut totals: std::collections::HashMap<String, Option<u64>> = Default::default();
    let requests = total(
        &operation.selection_set()?,
        &fragments,
        twice,
        &mut totals,
        &variable,
    )?;
    Some((name, kind, requests))
}

/// The requests of a selection set, counted from a multiplier of 1.
fn total(
    set: &cst::SelectionSet,
    fragments: &std::collections::HashMap<String, Option<cst::SelectionSet>>,
    twice: bool,
    totals: &mut std::collections::HashMap<String, Option<u64>>,
    variable: &dyn Fn(&str) -> Option<u64>,
) -> Option<u64> {
    let mut sum = 0u64;
    for selection in set.selections() {
        match selection {
            cst::Selection::Field(field) => {
                let mut size = None;
                if let Some(arguments) = field.arguments() {
                    for argument in arguments.arguments() {
                        let name = argument.name()?.text();
                        if name != "first" && name != "last" {
                            continue;
                        }
                        let count = match argument.value()? {
                            cst::Value::Variable(v) => variable(v.name()?.text().as_str()),
                            value => literal(&value),
                        }
                        .unwrap_or(UNKNOWN_COUNT);
                        size = Some(size.map_or(count, |s: u64| s.max(count)));
                    }
                }
                let inner = match field.selection_set() {
                    Some(set) => total(&set, fragments, twice, totals, variable)?,
                    None => 0,
                };
                sum = sum.saturating_add(match size {
                    Some(size) => 1u64.saturating_add(size.saturating_mul(inner)),
                    None => inner,
                });
            }
            cst::Selection::InlineFragment(fragment) => {
                let set = fragment.selection_set()?;
                sum = sum.saturating_add(total(&set, fragments, twice, totals, variable)?);
            }
            cst::Selection::FragmentSpread(spread) => {
                let name = spread.fragment_name()?.name()?.text().to_string();
                if twice {
                    return None;
                }
                let fragment_total = match totals.get(&name) {
                    Some(Some(done)) => *done,
                    // Open: a cycle.
                    Some(None) => return None,
                    None => {
                        let set = fragments.get(&name)?.clone()?;
                        totals.insert(name.clone(), None);
                        let done = total(&set, fragments, twice, totals, variable)?;
                        totals.insert(name, Some(done));
                        done
                    }
                };
                sum = sum.saturating_add(fragment_total);
            }
        }
    }
    Some(sum)
}

fn literal(value: &cst::Value) -> Option<u64> {
    let cst::Value::IntValue(int) = value else {
        return None;
    };
    let token: SyntaxToken = int.int_token()?;
    let text = token.text();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, text),
    };
    let value = digits.bytes().fold(0u64, |value, digit| {
        value
            .saturating_mul(10)
            .saturating_add(u64::from(digit - b'0'))
    });
    (!negative || value == 0).then_some(value)
}

fn json_count(value: &serde_json::Value) -> Option<u64> {
    let number = value.as_number()?;
    if let Some(value) = number.as_u64() {
        return Some(value);
    }
    if number.as_i64().is_some() {
        return None;
    }
    let value = number.as_f64()?;
    (value.is_finite() && value >= 0.0 && value.fract() == 0.0).then_some(value as u64)
}
