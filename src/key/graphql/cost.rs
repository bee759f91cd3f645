//! The cost of an operation as GitHub scores it (docs/conversation.md,
//! "What a GraphQL query costs"):
//!
//! - a field with a `first` or `last` argument is a connection;
//! - filling a connection takes as many requests as the product of the
//!   `first`/`last` of the connections it is nested in (1 for one nested in
//!   none); [`requests`] sums them over every connection;
//! - [`score`]: that sum divided by 100, rounded to the nearest whole number
//!   (a half rounds up), at least 1.
//!
//! A connection with both `first` and `last` counts the larger.
//! Fragments are counted where they are spread, inline or named, each spread
//! as often as it is written. Only the selected operation is counted.
//!
//! All arithmetic saturates at `u64::MAX`: a sum that reaches it is a score
//! of `u64::MAX`, never a wrapped small one.

use apollo_parser::cst::{self, CstChildren};

use super::document::token_text;
use super::variables::{literal, Count, Values, UNKNOWN_COUNT};

/// The requests filling every connection of `operation` takes; `None` when a
/// fragment spread names no fragment, or one named twice, or when fragments
/// spread one another in a cycle (GraphQL servers refuse such documents
/// without running them).
///
/// The walk keeps its own stack (the path from the operation down to the
/// selection set being read) rather than recursing, so neither deep nesting
/// nor a long chain of fragments can overflow the call stack. Each named
/// fragment's selection set is walked once, at a multiplier of 1: the
/// requests of a fragment spread under a multiplier are that many times
/// its total (every connection in it is nested in the same spread), so a
/// document that spreads fragments into one another many times over costs
/// one walk of each.
pub(super) fn requests(
    document: &cst::Document,
    operation: &cst::OperationDefinition,
    source: &str,
    values: &mut Values<'_, '_>,
) -> Option<u64> {
    let mut totals = Totals {
        operation: 0,
        fragments: None,
    };
    let mut stack = vec![Frame {
        selections: operation.selection_set()?.selections(),
        multiplier: 1,
        owner: Owner::Operation,
        finishes: None,
    }];
    while let Some(frame) = stack.last_mut() {
        let Some(selection) = frame.selections.next() else {
            if let Some(spread) = stack.pop().and_then(|frame| frame.finishes) {
                let total = totals.finish(spread.fragment);
                totals.add(spread.owner, spread.multiplier.saturating_mul(total));
            }
            continue;
        };
        let (multiplier, owner) = (frame.multiplier, frame.owner);
        let nested = match selection {
            cst::Selection::Field(field) => {
                let inner = match connection_size(&field, source, values) {
                    Some(size) => {
                        totals.add(owner, multiplier);
                        multiplier.saturating_mul(size)
                    }
                    None => multiplier,
                };
                field.selection_set().map(|set| Frame {
                    selections: set.selections(),
                    multiplier: inner,
                    owner,
                    finishes: None,
                })
            }
            cst::Selection::InlineFragment(fragment) => fragment.selection_set().map(|set| Frame {
                selections: set.selections(),
                multiplier,
                owner,
                finishes: None,
            }),
            cst::Selection::FragmentSpread(spread) => {
                let name = spread.fragment_name()?.name()?.ident_token()?;
                let name = token_text(source, &name)?;
                let fragments = match &mut totals.fragments {
                    Some(fragments) => fragments,
                    none => none.insert(Fragment::table(document, source)?),
                };
                let index = fragments
                    .binary_search_by(|fragment| fragment.name.cmp(name))
                    .ok()?;
                let fragment = &mut fragments[index];
                match fragment.state {
                    State::Done(total) => {
                        totals.add(owner, multiplier.saturating_mul(total));
                        None
                    }
                    // Spread inside its own selection set, at some depth.
                    State::Open(_) => return None,
                    State::Unvisited => {
                        fragment.state = State::Open(0);
                        fragment.selection_set.as_ref().map(|set| Frame {
                            selections: set.selections(),
                            multiplier: 1,
                            owner: Owner::Fragment(index),
                            finishes: Some(Spread {
                                fragment: index,
                                multiplier,
                                owner,
                            }),
                        })
                    }
                }
            }
        };
        stack.extend(nested);
    }
    Some(totals.operation)
}

/// GitHub's score of `requests`: divided by 100, rounded to the nearest
/// whole number (a half up), at least 1; `u64::MAX` for a sum that
/// saturated.
pub fn score(requests: u64) -> u64 {
    if requests == u64::MAX {
        return u64::MAX;
    }
    (requests / 100 + u64::from(requests % 100 >= 50)).max(1)
}

/// The larger of a field's `first` and `last` when it has either: it is a
/// connection of that size. A value that is not a non-negative integer, or
/// a variable with no value and no default, counts [`UNKNOWN_COUNT`].
fn connection_size(field: &cst::Field, source: &str, values: &mut Values<'_, '_>) -> Option<u64> {
    let mut size = None;
    for argument in field.arguments()?.arguments() {
        let Some(name) = argument.name().and_then(|name| name.ident_token()) else {
            continue;
        };
        if !matches!(name.text(), "first" | "last") {
            continue;
        }
        let count = argument
            .value()
            .and_then(|value| count(&value, source, values))
            .unwrap_or(UNKNOWN_COUNT);
        size = Some(size.map_or(count, |size: u64| size.max(count)));
    }
    size
}

fn count(value: &cst::Value, source: &str, values: &mut Values<'_, '_>) -> Count {
    match value {
        cst::Value::Variable(variable) => {
            let name = variable.name()?.ident_token()?;
            values.get(token_text(source, &name)?)
        }
        value => literal(value),
    }
}

/// A selection set being read.
struct Frame {
    selections: CstChildren<cst::Selection>,
    /// The product of the sizes of the connections it is nested in, within
    /// its owner.
    multiplier: u64,
    owner: Owner,
    /// For a named fragment's own selection set: the spread waiting for its
    /// total.
    finishes: Option<Spread>,
}

/// Whose total a connection adds to: the operation's, or that of the named
/// fragment whose selection set it is in (counted at a multiplier of 1).
#[derive(Clone, Copy)]
enum Owner {
    Operation,
    Fragment(usize),
}

/// A fragment spread whose fragment is being totalled.
struct Spread {
    fragment: usize,
    /// The multiplier it is spread under.
    multiplier: u64,
    /// Whose total it adds to.
    owner: Owner,
}

struct Totals<'s> {
    operation: u64,
    /// The document's named fragments, read on the first spread.
    fragments: Option<Vec<Fragment<'s>>>,
}

impl Totals<'_> {
    fn add(&mut self, owner: Owner, requests: u64) {
        let total = match owner {
            Owner::Operation => &mut self.operation,
            Owner::Fragment(index) => match self.fragments.as_mut().map(|f| &mut f[index].state) {
                Some(State::Open(total)) => total,
                // Only a fragment being totalled owns frames.
                _ => return,
            },
        };
        *total = total.saturating_add(requests);
    }

    /// Marks the fragment totalled; its total.
    fn finish(&mut self, index: usize) -> u64 {
        let Some(fragment) = self.fragments.as_mut().map(|f| &mut f[index]) else {
            return 0;
        };
        let total = match fragment.state {
            State::Open(total) | State::Done(total) => total,
            State::Unvisited => 0,
        };
        fragment.state = State::Done(total);
        total
    }
}

struct Fragment<'s> {
    name: &'s str,
    selection_set: Option<cst::SelectionSet>,
    state: State,
}

#[derive(Clone, Copy)]
enum State {
    Unvisited,
    /// Being walked (its selection set is on the stack), with its total so far.
    Open(u64),
    Done(u64),
}

impl<'s> Fragment<'s> {
    /// The document's fragments sorted by name; `None` when a name is
    /// defined twice.
    fn table(document: &cst::Document, source: &'s str) -> Option<Vec<Fragment<'s>>> {
        let mut fragments = Vec::new();
        for definition in document.definitions() {
            if let cst::Definition::FragmentDefinition(fragment) = definition {
                let name = fragment.fragment_name()?.name()?.ident_token()?;
                fragments.push(Fragment {
                    name: token_text(source, &name)?,
                    selection_set: fragment.selection_set(),
                    state: State::Unvisited,
                });
            }
        }
        fragments.sort_unstable_by(|a, b| a.name.cmp(b.name));
        if fragments
            .windows(2)
            .any(|pair| pair[0].name == pair[1].name)
        {
            return None;
        }
        Some(fragments)
    }
}
