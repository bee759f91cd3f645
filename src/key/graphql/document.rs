//! The document parsed within limits, and the operation a request runs.
//!
//! A document is read only when it parses without a single error: the
//! parser recovers from errors to build a tree anyway, but a GraphQL server
//! refuses such a document without running anything, so neither its name
//! nor its cost would be what runs.

use std::ops::Range;

use apollo_parser::{cst, Parser, SyntaxToken};

use super::OperationType;

/// The deepest nesting the parser follows: selection sets, and list and
/// object values, inside one another. The parser recurses once per level
/// and stops at this limit, so a body of nothing but `{` cannot overflow
/// the stack of a request's task; every walk over the tree after it is
/// bounded by the same depth. Queries in the wild nest a few tens of levels.
pub const RECURSION_LIMIT: usize = 128;

/// The most tokens (whitespace, commas and comments included) the lexer
/// reads: one per byte of a 64 KiB body, so the work a document can ask of
/// the parser stays bounded even where the body bound is raised.
pub const TOKEN_LIMIT: usize = 65_536;

/// The document in `source`, or `None` when it does not parse: a syntax
/// error, or more nesting or tokens than the limits.
pub(super) fn parse(source: &str) -> Option<cst::Document> {
    let tree = Parser::new(source)
        .recursion_limit(RECURSION_LIMIT)
        .token_limit(TOKEN_LIMIT)
        .parse();
    // A limit reached is reported as an error too; the high-water marks are
    // checked as well so that a limit can never truncate a tree silently.
    let within =
        tree.recursion_limit().high <= RECURSION_LIMIT && tree.token_limit().high <= TOKEN_LIMIT;
    (tree.errors().len() == 0 && within).then(|| tree.document())
}

/// The operation a request runs.
pub(super) struct Selected {
    pub operation: cst::OperationDefinition,
    /// Where its name is in the source (`None`: anonymous).
    pub name: Option<Range<usize>>,
    pub kind: OperationType,
}

/// The operation named `operation_name`, or the only one when no name is
/// given. `None`, as GraphQL servers refuse to run anything, when no
/// operation fits, when several do (several operations and no name; two
/// operations of that name), when an anonymous operation is not alone, or
/// when the document holds a definition that is not executable (a type or
/// schema definition).
pub(super) fn select(
    document: &cst::Document,
    source: &str,
    operation_name: Option<&str>,
) -> Option<Selected> {
    let mut chosen: Option<(cst::OperationDefinition, Option<Range<usize>>)> = None;
    let mut operations = 0usize;
    let mut anonymous = false;
    for definition in document.definitions() {
        let operation = match definition {
            cst::Definition::OperationDefinition(operation) => operation,
            cst::Definition::FragmentDefinition(_) => continue,
            _ => return None,
        };
        operations += 1;
        let name = match operation.name() {
            Some(name) => {
                let token = name.ident_token()?;
                Some((token_text(source, &token)?, range(&token)))
            }
            None => {
                anonymous = true;
                None
            }
        };
        let fits = match operation_name {
            Some(wanted) => name.as_ref().is_some_and(|(text, _)| *text == wanted),
            None => true,
        };
        if fits {
            if chosen.is_some() {
                return None;
            }
            chosen = Some((operation, name.map(|(_, range)| range)));
        }
    }
    if anonymous && operations > 1 {
        return None;
    }
    let (operation, name) = chosen?;
    let kind = match operation.operation_type() {
        // `{ ... }` alone is a query.
        None => OperationType::Query,
        Some(kind) if kind.mutation_token().is_some() => OperationType::Mutation,
        Some(kind) if kind.subscription_token().is_some() => OperationType::Subscription,
        Some(_) => OperationType::Query,
    };
    Some(Selected {
        operation,
        name,
        kind,
    })
}

/// A token's text as a slice of the source it was parsed from (the tree
/// holds every byte of the source, so its ranges are the source's; checked,
/// never trusted).
pub(super) fn token_text<'s>(source: &'s str, token: &SyntaxToken) -> Option<&'s str> {
    let text = source.get(range(token))?;
    (text == token.text()).then_some(text)
}

fn range(token: &SyntaxToken) -> Range<usize> {
    let range = token.text_range();
    usize::from(range.start())..usize::from(range.end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selected(source: &str, name: Option<&str>) -> Option<(Option<String>, OperationType)> {
        let document = parse(source)?;
        let selected = select(&document, source, name)?;
        Some((selected.name.map(|r| source[r].to_owned()), selected.kind))
    }

    #[test]
    fn the_only_operation_is_selected_without_a_name() {
        assert_eq!(
            selected("query A { a }", None),
            Some((Some("A".into()), OperationType::Query))
        );
        assert_eq!(selected("{ a }", None), Some((None, OperationType::Query)));
        assert_eq!(
            selected("query { a }", None),
            Some((None, OperationType::Query))
        );
        assert_eq!(
            selected("mutation M { a }", None),
            Some((Some("M".into()), OperationType::Mutation))
        );
        assert_eq!(
            selected("subscription { a }", None),
            Some((None, OperationType::Subscription))
        );
        assert_eq!(
            selected("fragment F on T { a } query Q { ...F }", None),
            Some((Some("Q".into()), OperationType::Query))
        );
    }

    #[test]
    fn the_named_operation_is_selected() {
        let source = "query A { a } mutation B { b }";
        assert_eq!(
            selected(source, Some("B")),
            Some((Some("B".into()), OperationType::Mutation))
        );
        assert_eq!(selected(source, None), None);
        assert_eq!(selected(source, Some("C")), None);
        assert_eq!(selected("{ a }", Some("A")), None);
    }

    #[test]
    fn ambiguous_or_invalid_documents_select_nothing() {
        assert_eq!(selected("query A { a } query A { b }", Some("A")), None);
        assert_eq!(selected("{ a } query B { b }", Some("B")), None);
        assert_eq!(selected("type T { a: Int } query A { a }", Some("A")), None);
        assert_eq!(selected("fragment F on T { a }", None), None);
        assert_eq!(selected("", None), None);
    }

    #[test]
    fn a_document_with_any_error_does_not_parse() {
        for source in [
            "{ a",
            "query A { a } }",
            "{ a(first: ) }",
            "query A { a } \u{7}",
            "{ a(first: \"x) }",
        ] {
            assert!(parse(source).is_none(), "{source:?}");
        }
    }

    #[test]
    fn nesting_beyond_the_limit_does_not_parse() {
        let nested = |depth: usize| format!("{}a{}", "{a".repeat(depth), "}".repeat(depth));
        assert!(parse(&nested(RECURSION_LIMIT)).is_some());
        assert!(parse(&nested(RECURSION_LIMIT + 1)).is_none());
        // A 64 KiB body of `{` parses to an error, on a small stack.
        let body = "{".repeat(65_536);
        let handle = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || parse(&body).is_none())
            .unwrap();
        assert!(handle.join().unwrap());
    }

    #[test]
    fn tokens_beyond_the_limit_do_not_parse() {
        let fields = |count: usize| format!("{{{}}}", "a ".repeat(count));
        // `{`, `}`, and a name and a space per field.
        assert!(parse(&fields((TOKEN_LIMIT - 3) / 2)).is_some());
        assert!(parse(&fields(TOKEN_LIMIT / 2)).is_none());
    }
}
