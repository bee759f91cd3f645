//! `sluice import envoy-ratelimit` in the real binary, on envoyproxy/ratelimit's
//! own example configs (tests/fixtures/envoy-ratelimit/): each one imports
//! into rules that `sluice check` accepts appended to a config with `[rls]`,
//! or, when it uses what sluice has no equivalent for, the import exits 1
//! naming the field and prints nothing on stdout
//! (docs/import-envoy-ratelimit.md).

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

/// Every fixture, and the error the import must report for it (`None`: it
/// imports).
const FIXTURES: &[(&str, Option<&str>)] = &[
    ("examples-ratelimit-config-config.yaml", None),
    (
        "examples-ratelimit-config-example.yaml",
        Some("descriptors[0].rate_limit.replaces: no equivalent"),
    ),
    ("readme-example-1.yaml", None),
    ("readme-example-2.yaml", None),
    ("readme-example-3.yaml", None),
    ("readme-example-4-match.yaml", None),
    ("readme-example-4-no-match.yaml", None),
    ("readme-example-5.yaml", None),
    ("readme-example-6.yaml", None),
    (
        "readme-example-7.yaml",
        Some("descriptors[1].descriptors[0].rate_limit.replaces: no equivalent"),
    ),
    ("readme-example-8.yaml", None),
    (
        "readme-example-9-middle.yaml",
        Some("descriptors[0].value: \"/api/*/action\" is a wildcard"),
    ),
    (
        "readme-example-9-multiple.yaml",
        Some("descriptors[0].value: \"/api/*/resource/*/action\" is a wildcard"),
    ),
    (
        "readme-example-9-trailing.yaml",
        Some("descriptors[0].value: \"value*\" is a wildcard"),
    ),
    ("readme-example-10.yaml", None),
    (
        "readme-example-10-wildcard.yaml",
        Some("descriptors[0].descriptors[0].value: \"read*\" is a wildcard"),
    ),
    (
        "readme-example-11.yaml",
        Some("descriptors[0].share_threshold: no equivalent"),
    ),
    (
        "readme-example-11-metrics.yaml",
        Some("descriptors[0].share_threshold: no equivalent"),
    ),
];

/// What the imported rules are appended to: an upstream and the rate limit
/// service's listener.
const BASE: &str =
    "[server]\nupstream = \"http://127.0.0.1:9\"\n\n[rls]\nlisten = \"127.0.0.1:0\"\n\n";

fn sluice(args: &[&str], file: &Path) -> Output {
    Command::new(support::binary())
        .args(args)
        .arg(file)
        .env_remove("SLUICE_CONFIG")
        .output()
        .expect("run sluice")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_envoy_ratelimit_example_imports_into_rules_check_accepts_or_is_refused_by_field() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envoy-ratelimit");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut listed: Vec<String> = FIXTURES.iter().map(|(name, _)| name.to_string()).collect();
    listed.sort();
    assert_eq!(
        found, listed,
        "every fixture needs its expected outcome here"
    );

    for (name, expected_error) in FIXTURES {
        let fixture = dir.join(name);
        let import = sluice(&["import", "envoy-ratelimit"], &fixture);
        let (stdout, stderr) = (text(&import.stdout), text(&import.stderr));
        if let Some(error) = expected_error {
            assert_eq!(import.status.code(), Some(1), "{name}: {stdout}");
            assert_eq!(stdout, "", "{name}: nothing on stdout when refused");
            assert!(
                stderr.contains(&format!("{}: {error}", fixture.display())),
                "{name}: {stderr}"
            );
            continue;
        }
        assert!(import.status.success(), "{name}: {stderr}");
        assert_eq!(stderr, "", "{name}");
        assert!(stdout.starts_with("# Imported by"), "{name}: {stdout}");
        let config = tempfile::tempdir().unwrap();
        let path = support::write_config(config.path(), &format!("{BASE}{stdout}"));
        let check = sluice(&["check", "--config"], &path);
        assert!(
            check.status.success(),
            "{name}: check refused the import:\n{}\n{BASE}{stdout}",
            text(&check.stderr)
        );
        // Every imported rule is one check lists.
        let listed = text(&check.stdout);
        for rule in stdout
            .lines()
            .filter_map(|line| line.strip_prefix("name = \""))
        {
            let rule = rule.trim_end_matches('"');
            assert!(
                listed
                    .lines()
                    .any(|line| line.starts_with(&format!("{rule} "))),
                "{name}: {rule} missing from\n{listed}"
            );
        }
    }
}

#[test]
fn a_file_that_cannot_be_read_is_an_error_naming_it() {
    let missing = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/no-such.yaml");
    let import = sluice(&["import", "envoy-ratelimit"], &missing);
    assert_eq!(import.status.code(), Some(1));
    assert_eq!(text(&import.stdout), "");
    assert!(
        text(&import.stderr).starts_with(&format!("error: could not read {}", missing.display())),
        "{}",
        text(&import.stderr)
    );
}
