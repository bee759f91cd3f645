//! The GraphQL inputs of benches/graphql.rs, shared with
//! scripts/bench/graphql-parsers (which compares the parser crates on
//! them).

/// `count` scalar fields of an object, one a line at `indent`.
pub fn scalars(prefix: &str, count: usize, indent: usize) -> String {
    (0..count)
        .map(|i| format!("{}{prefix}{i}\n", " ".repeat(indent)))
        .collect()
}

/// A query of 100 fields: 3 connections nested in one another
/// (repositories › issues › labels, with their `nodes`), and the scalar
/// fields spread among them. 1 + 100 + 5,000 requests: a cost of 51.
pub fn hundred_fields() -> String {
    // viewer, repositories, nodes, issues, nodes, labels, nodes: 7 fields;
    // 93 scalars.
    format!(
        "query Dashboard {{
  viewer {{
{}    repositories(first: 100) {{
      nodes {{
{}        issues(first: 50) {{
          nodes {{
{}            labels(first: 60) {{
              nodes {{
{}              }}
            }}
          }}
        }}
      }}
    }}
  }}
}}
",
        scalars("login", 13, 4),
        scalars("name", 30, 8),
        scalars("title", 30, 12),
        scalars("color", 20, 16),
    )
}

/// The query of a typical 1 KiB JSON POST: named, with variables sizing
/// its connections and a fragment.
pub const JSON_1K_QUERY: &str =
    "query RepositoryIssues($owner: String!, $name: String!, $first: Int = 20, $labels: Int) {
  repository(owner: $owner, name: $name) {
    id
    nameWithOwner
    description
    stargazerCount
    issues(first: $first, states: [OPEN], orderBy: {field: UPDATED_AT, direction: DESC}) {
      totalCount
      pageInfo {
        endCursor
        hasNextPage
      }
      nodes {
        ...IssueFields
        labels(first: $labels) {
          nodes {
            name
            color
          }
        }
      }
    }
  }
}

fragment IssueFields on Issue {
  id
  number
  title
  url
  state
  createdAt
  updatedAt
  author {
    login
    avatarUrl
  }
  comments {
    totalCount
  }
}
";
