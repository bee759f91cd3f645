//! The errors of a config file: every problem found, each with the line and
//! column of the offending value, displayed one per line as
//! `FILE:LINE:COLUMN: path: message`.

use std::fmt;
use std::sync::Arc;

/// One problem in a config file, at the position of the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line; 0 when the problem has no position (the file could not be read).
    pub line: usize,
    /// 1-based column in characters; 0 when `line` is 0.
    pub column: usize,
    /// Where in the config the problem is, like `rule[2].burst`; empty for
    /// TOML syntax and type errors, whose message names the key.
    pub path: String,
    /// What is wrong and what is allowed; one line.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: ", self.line, self.column)?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in one config file. Displays as one line per problem:
/// `FILE:LINE:COLUMN: path: message`.
#[derive(Debug, Clone)]
pub struct ConfigErrors {
    /// The file name as given (or whatever the caller named the text).
    pub origin: String,
    /// In file order; never empty.
    pub errors: Vec<ConfigError>,
    /// Kept as the `source()` when the file could not be read.
    pub(super) io: Option<Arc<std::io::Error>>,
}

impl ConfigErrors {
    /// The file could not be read at all.
    pub fn io(origin: &str, err: std::io::Error) -> ConfigErrors {
        ConfigErrors {
            origin: origin.to_owned(),
            errors: vec![ConfigError {
                line: 0,
                column: 0,
                path: String::new(),
                message: format!("cannot read the config file: {err}"),
            }],
            io: Some(Arc::new(err)),
        }
    }

    /// How many problems were found.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// Always false for errors built by this module; here for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            // `error` starts with `LINE:COLUMN: ` when it has a position.
            let separator = if error.line == 0 { ": " } else { ":" };
            write!(f, "{}{separator}{error}", self.origin)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io
            .as_deref()
            .map(|err| err as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn an_unreadable_file_is_one_error_without_position() {
        let errors = ConfigErrors::io(
            "missing.toml",
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert_eq!(errors.len(), 1);
        assert!(
            errors
                .to_string()
                .starts_with("missing.toml: cannot read the config file: "),
            "{errors}"
        );
        assert!(std::error::Error::source(&errors).is_some());
        let errors = Config::load(std::path::Path::new("/nonexistent/sluice.toml")).unwrap_err();
        assert!(
            errors
                .to_string()
                .starts_with("/nonexistent/sluice.toml: cannot read"),
            "{errors}"
        );
    }
}
