//! `sluice import`: other rate limiters' configs translated into sluice
//! `[[rule]]` tables, printed for the operator to append to a config.
//!
//! - [`envoy_ratelimit`]: an envoyproxy/ratelimit YAML file (one domain)
//!   into rules for sluice's rate limit service (docs/import-envoy-ratelimit.md).
//!
//! An importer is a pure function from the file's text to TOML text: it
//! reads no file and writes nothing, and it refuses (with every reason at
//! once) rather than print rules that would decide differently.

use std::fmt;

pub mod envoy_ratelimit;

/// Why a file could not be imported: every problem found, each at the path
/// of the field in the source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportError {
    /// The file, as the operator named it.
    pub source_name: String,
    pub problems: Vec<Problem>,
}

/// One field that has no sluice equivalent, or is not valid where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where in the source file, e.g. `descriptors[2].rate_limit.replaces`;
    /// empty for the file as a whole.
    pub path: String,
    /// Why, as a sentence that follows `path: `.
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// One line per problem: `FILE: PATH: why`.
impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            match problem.path.as_str() {
                "" => write!(f, "{}: {}", self.source_name, problem.message)?,
                path => write!(f, "{}: {path}: {}", self.source_name, problem.message)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ImportError {}
