//! GraphQL requests: the operation a request runs (`graphql:operation`), its
//! type (`graphql:type`) and its cost as GitHub scores it (`cost =
//! "graphql"`); docs/conversation.md, "Keys from GraphQL operations".
//!
//! Pure: [`read`] takes a request's body or query string, already read, and
//! never does I/O or logs. It parses with a parser of its own (`document`),
//! within [`RECURSION_LIMIT`] and [`TOKEN_LIMIT`] and without recursing
//! into selection sets, so any bytes a client sends take bounded time,
//! memory and stack. It allocates the document's flat list of nodes (one
//! list, not a tree of allocations), the document's text when the request
//! escapes it (a JSON string with escapes, a GET's percent-encoding), and a
//! sorted list of the fragments, of the `variables` and of the defaults
//! when the cost needs them.
//!
//! - `request`: the three shapes (JSON POST, `application/graphql`, GET)
//!   read into a document, an `operationName` and `variables`.
//! - `document`: the document parsed, and the operation selected.
//! - `variables`: what a `first`/`last` counts as.
//! - `cost`: the requests of the operation's connections, and [`score`].
//! - `persisted`: the documents sluice knows by their hash.
//! - `reading`: a whole request read for a rule ([`Reading`]): a batch's
//!   operations, persisted queries, and what could not be read.
//!
//! An operation is read whole or not at all: when any part of it is one a
//! GraphQL server would refuse before running anything (see [`read`]), it
//! has no operation, which a key counts as missing and a cost rule decides
//! by its `unreadable`.

mod cost;
mod document;
pub mod persisted;
mod reading;
mod request;
mod variables;

use std::borrow::Cow;

pub use cost::score;
pub use document::{RECURSION_LIMIT, TOKEN_LIMIT};
pub use reading::{read_all, Answer, Reading, Unread};

/// How a GraphQL request carries its operation.
#[derive(Debug, Clone, Copy)]
pub enum GraphqlRequest<'a> {
    /// A POST with a JSON body: `{"query": "...", "operationName": "...",
    /// "variables": {...}}`.
    Json(&'a [u8]),
    /// A POST with `Content-Type: application/graphql`: the body is the
    /// document.
    Document(&'a [u8]),
    /// A GET: the raw (percent-encoded) query string, with `query`,
    /// `operationName` and `variables` (JSON) parameters.
    Get(&'a str),
}

/// The type of a GraphQL operation (`graphql:type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationType {
    Query,
    Mutation,
    Subscription,
}

impl OperationType {
    /// `query`, `mutation` or `subscription`: the key text.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationType::Query => "query",
            OperationType::Mutation => "mutation",
            OperationType::Subscription => "subscription",
        }
    }
}

/// The key text of an operation without a name.
pub const ANONYMOUS: &str = "anonymous";

/// What a GraphQL request asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation<'a> {
    /// `None` for an anonymous operation (its key text is [`ANONYMOUS`]).
    /// Borrowed from the request unless the request escapes it (a JSON
    /// escape, percent-encoding).
    pub name: Option<Cow<'a, str>>,
    pub kind: OperationType,
    /// The requests filling the operation's connections takes (saturating
    /// at `u64::MAX`): what the cost is computed from.
    pub requests: u64,
    /// GitHub's rate-limit score of the operation: [`score`] of `requests`,
    /// at least 1, `u64::MAX` when the sum saturated.
    pub cost: u64,
}

impl Operation<'_> {
    /// The `graphql:operation` key text: the name, or [`ANONYMOUS`].
    pub fn name_text(&self) -> &str {
        self.name.as_deref().unwrap_or(ANONYMOUS)
    }

    /// The same operation, owning its name.
    pub fn into_owned(self) -> Operation<'static> {
        Operation {
            name: self.name.map(|name| Cow::Owned(name.into_owned())),
            kind: self.kind,
            requests: self.requests,
            cost: self.cost,
        }
    }
}

/// Reads the operation a request runs, its type and its cost.
///
/// The operation is the one `operationName` names (it must name exactly one
/// operation of the document), else the document's only operation. `None`
/// when it cannot be known: a body that is not a JSON object, no `query`
/// string, `variables` that are not an object, a document that does not
/// parse (within the limits), a definition that is not executable, several
/// operations and no `operationName`, an anonymous operation beside others,
/// an `operationName` naming none or two of them, and, in the operation, a
/// spread of an undefined fragment, a fragment defined twice or fragments
/// spread in a cycle. Such a request's key is missing. A batch or a
/// persisted query is read by [`read_all`].
pub fn read(request: GraphqlRequest<'_>) -> Option<Operation<'_>> {
    operation_of(request::Parts::read(request)?)
}

/// The operation `parts` run, when they carry a document ([`read`]).
fn operation_of(parts: request::Parts<'_>) -> Option<Operation<'_>> {
    let source = parts.source?;
    let (name, kind, requests) = {
        let source: &str = &source;
        let document = document::parse(source)?;
        let selected = document::select(&document, parts.operation_name.as_deref())?;
        let defaults = document.defaults.get(selected.defaults.clone())?;
        let mut values = variables::Values::new(parts.variables.as_deref(), defaults);
        let requests = cost::requests(&document, selected.open, &mut values)?;
        (selected.name, selected.kind, requests)
    };
    let name = match (parts.operation_name, source) {
        (Some(given), _) => Some(given),
        (None, Cow::Borrowed(source)) => {
            name.and_then(|range| source.get(range)).map(Cow::Borrowed)
        }
        (None, Cow::Owned(source)) => name
            .and_then(|range| source.get(range))
            .map(|name| Cow::Owned(name.to_owned())),
    };
    Some(Operation {
        name,
        kind,
        requests,
        cost: score(requests),
    })
}

#[cfg(test)]
mod tests;
