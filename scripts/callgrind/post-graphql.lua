-- wrk: every request the same 1 KiB JSON POST, a GraphQL query with a tenant
-- id and an API key (scripts/bench/conversation.py's body), for the
-- key-*.toml configs: keyed on the header, on body:/tenant/id, or on
-- graphql:operation.
wrk.method = "POST"
wrk.body = "{\"query\":\"query GetRepository($owner: String!, $name: String!, $first: Int = 10) { repository(owner: $owner, name: $name) { id name description url stargazerCount forkCount createdAt updatedAt primaryLanguage { name color } licenseInfo { name spdxId } owner { login avatarUrl url } issues(first: $first, states: OPEN) { totalCount edges { node { id number title createdAt author { login } labels(first: 5) { edges { node { name color } } } } } } pullRequests(first: $first) { totalCount edges { node { id number title state } } } } }\",\"operationName\":\"GetRepository\",\"variables\":{\"owner\":\"octocat\",\"name\":\"hello-world\",\"first\":10},\"tenant\":{\"id\":\"tenant-0042\"},\"client\":{\"app\":\"bench\",\"version\":\"1.0\"},\"pad\":\"ppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp\"}"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Api-Key"] = "key-0042"
