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

use super::document::{Definition, Document, Node};
use super::variables::{Values, UNKNOWN_COUNT};

/// The requests filling every connection of the operation whose selection
/// set opens at `open` takes; `None` when a fragment spread names no
/// fragment, or one named twice, or when fragments spread one another in a
/// cycle (GraphQL servers refuse such documents without running them).
///
/// The walk reads the document's flat list of nodes with its own stack
/// (the selection sets open from the operation down to the one being
/// read) rather than recursing, so neither deep nesting nor a long chain
/// of fragments can overflow the call stack. Each named fragment's
/// selection set is walked once, at a multiplier of 1: the requests of a
/// fragment spread under a multiplier are that many times its total (every
/// connection in it is nested in the same spread), so a document that
/// spreads fragments into one another many times over costs one walk of
/// each.
pub(super) fn requests(
    document: &Document<'_>,
    open: usize,
    values: &mut Values<'_, '_>,
) -> Option<u64> {
    let nodes = &document.nodes;
    let mut totals = Totals {
        operation: 0,
        fragments: None,
    };
    let mut stack = Vec::with_capacity(16);
    stack.push(Frame {
        next: open + 1,
        multiplier: 1,
        owner: Owner::Operation,
        finishes: None,
    });
    // The size of the field being read (the larger of its `first` and
    // `last`), and the multiplier of the selection set of the connection
    // just read.
    let mut size: Option<u64> = None;
    let mut inner = 1u64;
    while let Some(frame) = stack.last_mut() {
        let node = nodes.get(frame.next)?;
        frame.next += 1;
        let (multiplier, owner) = (frame.multiplier, frame.owner);
        match node {
            Node::Count(count) => widen(&mut size, count.unwrap_or(UNKNOWN_COUNT)),
            Node::Variable(name) => {
                widen(
                    &mut size,
                    values.get(document.text(name)).unwrap_or(UNKNOWN_COUNT),
                );
            }
            Node::Connection => {
                totals.add(owner, multiplier);
                inner = multiplier.saturating_mul(size.take().unwrap_or(UNKNOWN_COUNT));
            }
            Node::Open { scaled } => {
                let multiplier = if *scaled { inner } else { multiplier };
                let next = frame.next;
                stack.push(Frame {
                    next,
                    multiplier,
                    owner,
                    finishes: None,
                });
            }
            Node::Close => totals.close(&mut stack)?,
            Node::Spread(name) => {
                totals.spread(document, document.text(name), owner, multiplier, &mut stack)?;
            }
        }
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

/// A selection set being read.
struct Frame {
    /// Its next node in [`Document::nodes`].
    next: usize,
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

/// A field's size so far widened to `count` (a connection counts the
/// larger of its `first` and `last`).
fn widen(size: &mut Option<u64>, count: u64) {
    *size = Some(size.map_or(count, |size| size.max(count)));
}

impl<'s> Totals<'s> {
    /// A selection set closes: a named fragment's total goes where it was
    /// spread; a nested one's parent goes on after it. `None`: nothing was
    /// open.
    fn close(&mut self, stack: &mut Vec<Frame>) -> Option<()> {
        let done = stack.pop()?;
        match done.finishes {
            Some(spread) => {
                let total = self.finish(spread.fragment);
                self.add(spread.owner, spread.multiplier.saturating_mul(total));
            }
            // The parent goes on after the nested selection set.
            None => {
                if let Some(parent) = stack.last_mut() {
                    parent.next = done.next;
                }
            }
        }
        Some(())
    }

    /// The fragment `name` spread under `multiplier` for `owner`: its total
    /// when known, else its selection set opened to total it. `None` when
    /// no fragment (or two) has that name, or it is spread inside itself.
    fn spread(
        &mut self,
        document: &Document<'s>,
        name: &str,
        owner: Owner,
        multiplier: u64,
        stack: &mut Vec<Frame>,
    ) -> Option<()> {
        let fragments = match &mut self.fragments {
            Some(fragments) => fragments,
            none => none.insert(Fragment::table(document)?),
        };
        let index = fragments
            .binary_search_by(|fragment| fragment.name.cmp(name))
            .ok()?;
        let fragment = &mut fragments[index];
        match fragment.state {
            State::Done(total) => self.add(owner, multiplier.saturating_mul(total)),
            // Spread inside its own selection set, at some depth.
            State::Open(_) => return None,
            State::Unvisited => {
                fragment.state = State::Open(0);
                stack.push(Frame {
                    next: fragment.open + 1,
                    multiplier: 1,
                    owner: Owner::Fragment(index),
                    finishes: Some(Spread {
                        fragment: index,
                        multiplier,
                        owner,
                    }),
                });
            }
        }
        Some(())
    }

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
    /// Its selection set's `Open` in [`Document::nodes`].
    open: usize,
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
    fn table(document: &Document<'s>) -> Option<Vec<Fragment<'s>>> {
        let mut fragments: Vec<Fragment<'s>> = document
            .definitions
            .iter()
            .filter_map(|definition| match definition {
                Definition::Fragment { name, open } => Some(Fragment {
                    name: document.source.get(name.clone()).unwrap_or_default(),
                    open: *open,
                    state: State::Unvisited,
                }),
                Definition::Operation { .. } => None,
            })
            .collect();
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
