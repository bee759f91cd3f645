//! What the importers' tests share.

use super::ImportError;

/// The `[[rule]]` tables of an import's output, each a TOML table.
pub(super) fn rules_of(imported: Result<String, ImportError>) -> Vec<toml::Table> {
    let text = imported.unwrap_or_else(|error| panic!("{error}"));
    let parsed: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    match parsed.get("rule") {
        Some(toml::Value::Array(rules)) => rules
            .iter()
            .map(|rule| rule.as_table().cloned().unwrap())
            .collect(),
        None => Vec::new(),
        Some(other) => panic!("{other:?}"),
    }
}

/// Every problem of a refused import of `test.yaml`, as `path: message`.
pub(super) fn problems_of(imported: Result<String, ImportError>) -> Vec<String> {
    match imported {
        Ok(text) => panic!("imported:\n{text}"),
        Err(error) => {
            assert_eq!(error.source_name, "test.yaml");
            error
                .problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect()
        }
    }
}

/// The one problem of a refused import.
pub(super) fn only(found: Vec<String>) -> String {
    assert_eq!(found.len(), 1, "{found:#?}");
    found.into_iter().next().unwrap()
}
