//! `[identity.jwt]`: how request tokens are verified. Its key material (the
//! secret from the environment, a PEM or JWKS file) is loaded and checked
//! here, so a bad key is a config error with a position.

use http::HeaderName;
use toml::Spanned;

use super::keys::parse_key_source;
use super::raw::{OneOrMany, RawConfig, RawRule};
use super::validate::Validator;
use super::{joined, JwtAlgorithm, JwtConfig, JwtKey, KeySource};

/// Largest `public_key_file` / `jwks_file` read. Real keys and key sets are
/// a few KiB; the bound keeps `/dev/zero` or a mistyped path to a huge file
/// from taking all memory (fuzz/config writes such paths).
const MAX_KEY_FILE_BYTES: u64 = 1024 * 1024;

fn read_key_file(file: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(file)?
        .take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "it is larger than {} KiB, which no key file is",
            MAX_KEY_FILE_BYTES / 1024
        )));
    }
    Ok(bytes)
}

impl Validator<'_> {
    /// `[identity.jwt]`, with its key material loaded and checked.
    pub(super) fn identity(&mut self, raw: &RawConfig) -> Option<JwtConfig> {
        let jwt = raw.identity.as_ref()?.jwt.as_ref()?;
        let at = self.table_position(
            "[identity.jwt]",
            &[
                jwt.header.as_ref().map(Spanned::span),
                jwt.algorithms.as_ref().map(Spanned::span),
                jwt.secret_env.as_ref().map(Spanned::span),
                jwt.public_key_file.as_ref().map(Spanned::span),
                jwt.jwks_file.as_ref().map(Spanned::span),
                jwt.verify.as_ref().map(Spanned::span),
            ],
        );
        let header = jwt.header.as_ref().and_then(|field| {
            let written = field.get_ref();
            let name =
                HeaderName::from_bytes(written.to_ascii_lowercase().as_bytes()).map_err(|_| {
                    format!("\"{written}\" is not a valid header name (default \"authorization\")")
                });
            self.ok(field.span().start, "identity.jwt.header", name)
        });
        let header = header.unwrap_or(HeaderName::from_static("authorization"));
        let algorithms = self.jwt_algorithms(jwt.algorithms.as_ref());
        let verify = jwt.verify.as_ref().is_none_or(|v| *v.get_ref());
        if let (false, Some(field)) = (verify, &jwt.verify) {
            self.warn(
                field.span().start,
                "identity.jwt.verify",
                "tokens are read without checking their signature, so any client can pick its \
                 bucket by writing its own claims; use only behind a gateway that rejects \
                 every unverified token",
            );
        }
        let key = match algorithms.first() {
            // Not needed without verification; invalid algorithms are
            // already reported.
            _ if !verify => None,
            None => None,
            Some(alg) if alg.is_hmac() => self.jwt_secret(jwt, at, &algorithms),
            Some(_) => self.jwt_public_key(jwt, at, &algorithms),
        };
        Some(JwtConfig {
            header,
            algorithms,
            key,
            verify,
        })
    }

    /// `identity.jwt.algorithms` (default `["HS256"]`): known algorithms,
    /// never `none`, never HMAC together with public-key ones.
    fn jwt_algorithms(&mut self, field: Option<&Spanned<OneOrMany>>) -> Vec<JwtAlgorithm> {
        const PATH: &str = "identity.jwt.algorithms";
        let Some(field) = field else {
            return vec![JwtAlgorithm::HS256];
        };
        let allowed = joined(
            JwtAlgorithm::ALL
                .iter()
                .map(|alg| format!("\"{}\"", alg.name())),
            ", ",
        );
        let items = field.get_ref().items_at(field.span(), PATH);
        if items.is_empty() {
            self.error(
                field.span().start,
                PATH,
                format!("must list at least one algorithm: {allowed}"),
            );
        }
        let mut algorithms: Vec<JwtAlgorithm> = Vec::with_capacity(items.len());
        for (text, span, path) in items {
            let found = JwtAlgorithm::ALL.into_iter().find(|a| a.name() == text);
            let hmac_mixed =
                |alg: JwtAlgorithm| algorithms.first().filter(|f| f.is_hmac() != alg.is_hmac());
            let alg = match found {
                None if text.eq_ignore_ascii_case("none") => Err(format!(
                    "\"{text}\" is never accepted: an unsigned token proves nothing, anyone can \
                     write one; use one of {allowed}"
                )),
                None => Err(format!("\"{text}\" is not an algorithm sluice verifies; use one of {allowed}")),
                Some(alg) if algorithms.contains(&alg) => {
                    Err(format!("\"{text}\" is already listed; list each algorithm once"))
                }
                Some(alg) => match hmac_mixed(alg) {
                    Some(first) => Err(format!(
                        "\"{text}\" cannot be listed with \"{}\": HMAC and public-key algorithms \
                         together let a token \"signed\" with the public key as an HMAC secret \
                         verify (algorithm confusion); list only HS* algorithms (with secret_env) or \
                         only RS*/ES* ones (with public_key_file or jwks_file)",
                        first.name()
                    )),
                    None => Ok(alg),
                },
            };
            let alg = self.ok(span.start, &path, alg);
            algorithms.extend(alg);
        }
        algorithms
    }

    /// The HMAC secret, from the environment variable `secret_env` names.
    fn jwt_secret(
        &mut self,
        jwt: &super::raw::RawJwt,
        at: usize,
        algorithms: &[JwtAlgorithm],
    ) -> Option<JwtKey> {
        let names = jwt_names(algorithms);
        for (key, field) in [
            ("public_key_file", &jwt.public_key_file),
            ("jwks_file", &jwt.jwks_file),
        ] {
            if let Some(field) = field {
                self.error(
                    field.span().start,
                    &format!("identity.jwt.{key}"),
                    format!(
                        "{names} tokens are verified with a shared secret (secret_env), not a \
                         public key; remove {key}, or list RS*/ES* algorithms"
                    ),
                );
            }
        }
        let (name, at) = match &jwt.secret_env {
            Some(field) => (field.get_ref().as_str(), field.span().start),
            None => ("SLUICE_JWT_SECRET", at),
        };
        let path = "identity.jwt.secret_env";
        if name.is_empty() {
            return self.invalid(at, path, "must name an environment variable");
        }
        let secret = match std::env::var_os(name) {
            None => Err(format!(
                "is not set; it must hold the secret tokens are signed with ({names})"
            )),
            Some(value) if value.is_empty() => Err("is empty; it must hold the secret".to_owned()),
            Some(value) => Ok(value.into_encoded_bytes()),
        };
        let secret = secret.map_err(|problem| format!("the environment variable {name} {problem}"));
        let secret = self.ok(at, path, secret)?;
        // RFC 7518 §3.2: at least as long as the hash's output.
        let wanted = algorithms
            .iter()
            .map(|alg| match alg {
                JwtAlgorithm::HS384 => 48,
                JwtAlgorithm::HS512 => 64,
                _ => 32,
            })
            .max()
            .unwrap_or(32);
        if secret.len() < wanted {
            self.warn(
                at,
                path,
                format_args!(
                    "the secret in {name} is {} bytes; use at least {wanted} for {names} (RFC \
                     7518 §3.2), or it may be guessed offline from any token",
                    secret.len()
                ),
            );
        }
        Some(JwtKey::Secret(secret))
    }

    /// The PEM public key from `public_key_file`, which must serve every
    /// listed algorithm, or the JWKS from `jwks_file` (either relative to
    /// the config file's directory).
    fn jwt_public_key(
        &mut self,
        jwt: &super::raw::RawJwt,
        at: usize,
        algorithms: &[JwtAlgorithm],
    ) -> Option<JwtKey> {
        let names = jwt_names(algorithms);
        if let Some(field) = &jwt.secret_env {
            self.error(
                field.span().start,
                "identity.jwt.secret_env",
                format!(
                    "{names} tokens are verified with a public key (public_key_file or \
                     jwks_file), not a shared secret; remove secret_env, or list HS* algorithms"
                ),
            );
        }
        let (key, field, wrap): (_, _, fn(Vec<u8>) -> JwtKey) =
            match (&jwt.public_key_file, &jwt.jwks_file) {
                (Some(_), Some(jwks)) => {
                    return self.invalid(
                        jwks.span().start,
                        "identity.jwt.jwks_file",
                        "give either public_key_file or jwks_file, not both",
                    )
                }
                (Some(pem), None) => ("public_key_file", pem, JwtKey::PublicKeyPem),
                (None, Some(jwks)) => ("jwks_file", jwks, JwtKey::Jwks),
                (None, None) => {
                    return self.invalid(
                        at,
                        "identity.jwt.public_key_file",
                        format!(
                            "{names} tokens need public_key_file = \"path/to/public.pem\" (or \
                             jwks_file = \"path/to/jwks.json\")"
                        ),
                    )
                }
            };
        let path = format!("identity.jwt.{key}");
        let file = self.file_path(field.get_ref());
        let key = read_key_file(&file)
            .map_err(|err| format!("cannot read {}: {err}", file.display()))
            .map(wrap)
            .and_then(
                |key| match crate::key::jwt::verification_keys(&key, algorithms) {
                    Ok(_) => Ok(key),
                    Err(message) => Err(format!("{} {message}", file.display())),
                },
            );
        self.ok(field.span().start, &path, key)
    }

    /// Every `jwt:<claim>` in a rule's key needs `[identity.jwt]`: without
    /// it no token could verify.
    pub(super) fn jwt_sources_need_identity(&mut self, raw: &[RawRule], configured: bool) {
        if configured {
            return;
        }
        for (index, rule) in raw.iter().enumerate() {
            let keys = rule
                .key
                .iter()
                .flat_map(|field| field.get_ref().items(field.span()))
                .enumerate()
                .map(|(i, item)| (format!("rule[{index}].key[{i}]"), item));
            let tier_by = rule
                .tiers
                .as_ref()
                .and_then(|tiers| tiers.value.by.as_ref())
                .map(|by| {
                    (
                        format!("rule[{index}].tiers.by"),
                        (by.get_ref().as_str(), by.span()),
                    )
                });
            for (path, (text, span)) in keys.chain(tier_by) {
                if let Ok(KeySource::Jwt(_)) = parse_key_source(text) {
                    self.error(
                        span.start,
                        &path,
                        format!(
                            "\"{text}\" needs an [identity.jwt] table saying how tokens are \
                             verified"
                        ),
                    );
                }
            }
        }
    }
}

/// `"HS256"`, `"HS256, HS384"`: the listed algorithms, for messages.
fn jwt_names(algorithms: &[JwtAlgorithm]) -> String {
    joined(algorithms.iter().map(|alg| alg.name()), ", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;
    use crate::config::Config;

    fn jwt_rule() -> &'static str {
        "[[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = \"jwt:sub\"\n"
    }

    #[test]
    fn a_jwt_key_needs_identity_jwt() {
        let line = only_error(&format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"ip\", \"jwt:sub\"]\n"
        ));
        assert_eq!(
            line,
            "test.toml:6:14: rule[0].key[1]: \"jwt:sub\" needs an [identity.jwt] table saying \
             how tokens are verified"
        );
    }

    #[test]
    fn identity_jwt_defaults_to_hs256_from_the_authorization_header() {
        set_env(
            "SLUICE_TEST_DEFAULTS_SECRET",
            "0123456789abcdef0123456789abcdef",
        );
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_DEFAULTS_SECRET\"\n{}",
            jwt_rule()
        ));
        let jwt = config.identity.jwt.expect("identity.jwt");
        assert_eq!(jwt.header, "authorization");
        assert_eq!(jwt.algorithms, vec![JwtAlgorithm::HS256]);
        assert!(jwt.verify);
        assert!(
            matches!(&jwt.key, Some(JwtKey::Secret(s)) if s == b"0123456789abcdef0123456789abcdef")
        );
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn an_unset_or_empty_secret_variable_is_an_error_naming_it() {
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_NEVER_SET\"\n{}",
            jwt_rule()
        ));
        assert_eq!(
            line,
            "test.toml:4:14: identity.jwt.secret_env: the environment variable \
             SLUICE_TEST_NEVER_SET is not set; it must hold the secret tokens are signed with \
             (HS256)"
        );
        set_env("SLUICE_TEST_EMPTY_SECRET", "");
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_EMPTY_SECRET\"\n{}",
            jwt_rule()
        ));
        assert!(
            line.starts_with("test.toml:4:14: identity.jwt.secret_env: the environment variable SLUICE_TEST_EMPTY_SECRET is empty"),
            "{line}"
        );
    }

    #[test]
    fn a_short_secret_is_a_warning_that_never_shows_it() {
        set_env("SLUICE_TEST_SHORT_SECRET", "hunter2");
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = [\"HS256\", \"HS512\"]\n\
             secret_env = \"SLUICE_TEST_SHORT_SECRET\"\n{}",
            jwt_rule()
        ));
        assert_eq!(
            config.warnings,
            vec![
                "test.toml:5:14: identity.jwt.secret_env: the secret in SLUICE_TEST_SHORT_SECRET \
                  is 7 bytes; use at least 64 for HS256, HS512 (RFC 7518 §3.2), or it may be \
                  guessed offline from any token"
            ]
        );
    }

    #[test]
    fn none_and_unknown_algorithms_are_errors_listing_the_allowed_ones() {
        let lines = errors(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = [\"none\", \"PS256\", \"hs256\"]\nverify = false\n{}",
            jwt_rule()
        ));
        let allowed = "\"HS256\", \"HS384\", \"HS512\", \"RS256\", \"RS384\", \"RS512\", \"ES256\", \"ES384\"";
        assert_eq!(
            lines,
            vec![
                format!("test.toml:4:15: identity.jwt.algorithms[0]: \"none\" is never accepted: an unsigned token proves nothing, anyone can write one; use one of {allowed}"),
                format!("test.toml:4:23: identity.jwt.algorithms[1]: \"PS256\" is not an algorithm sluice verifies; use one of {allowed}"),
                format!("test.toml:4:32: identity.jwt.algorithms[2]: \"hs256\" is not an algorithm sluice verifies; use one of {allowed}"),
            ]
        );
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = []\nverify = false\n{}",
            jwt_rule()
        ));
        assert!(
            line.starts_with(
                "test.toml:4:14: identity.jwt.algorithms: must list at least one algorithm"
            ),
            "{line}"
        );
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"None\"\nverify = false\n{}",
            jwt_rule()
        ));
        assert!(
            line.starts_with("test.toml:4:14: identity.jwt.algorithms: \"None\" is never accepted"),
            "{line}"
        );
    }

    #[test]
    fn hmac_and_public_key_algorithms_cannot_be_mixed() {
        let lines = errors(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = [\"RS256\", \"HS256\", \"RS256\"]\n\
             public_key_file = \"tests/fixtures/jwt/rsa-public.pem\"\n{}",
            jwt_rule()
        ));
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].starts_with(
                "test.toml:4:24: identity.jwt.algorithms[1]: \"HS256\" cannot be listed with \"RS256\": HMAC and public-key algorithms together"
            ),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("algorithm confusion"), "{}", lines[0]);
        assert_eq!(
            lines[1],
            "test.toml:4:33: identity.jwt.algorithms[2]: \"RS256\" is already listed; list each algorithm once"
        );
    }

    #[test]
    fn public_key_algorithms_read_a_pem_file() {
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nheader = \"X-Token\"\nalgorithms = [\"RS256\", \"RS512\"]\n\
             public_key_file = \"tests/fixtures/jwt/rsa-public.pem\"\n{}",
            jwt_rule()
        ));
        let jwt = config.identity.jwt.expect("identity.jwt");
        assert_eq!(jwt.header, "x-token");
        assert_eq!(
            jwt.algorithms,
            vec![JwtAlgorithm::RS256, JwtAlgorithm::RS512]
        );
        assert!(
            matches!(&jwt.key, Some(JwtKey::PublicKeyPem(pem)) if pem.starts_with(b"-----BEGIN PUBLIC KEY-----"))
        );
        valid(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"ES256\"\n\
             public_key_file = \"tests/fixtures/jwt/ec256-public.pem\"\n{}",
            jwt_rule()
        ));
    }

    #[test]
    fn a_key_file_that_is_missing_or_does_not_fit_is_an_error_at_its_path() {
        let cases = [
            ("RS256", "tests/fixtures/jwt/nowhere.pem", "cannot read tests/fixtures/jwt/nowhere.pem: "),
            ("RS256", "tests/fixtures/jwt/README.md", "tests/fixtures/jwt/README.md is not a PEM public key"),
            ("RS256", "tests/fixtures/jwt/rsa-private.pem", "tests/fixtures/jwt/rsa-private.pem holds a private key"),
            ("RS256", "tests/fixtures/jwt/ec256-public.pem", "tests/fixtures/jwt/ec256-public.pem holds no key usable for RS256 (an RSA public key)"),
            ("ES384", "tests/fixtures/jwt/ec256-public.pem", "tests/fixtures/jwt/ec256-public.pem holds no key usable for ES384 (an EC P-384 public key)"),
        ];
        for (alg, file, message) in cases {
            let line = only_error(&format!(
                "{UPSTREAM}[identity.jwt]\nalgorithms = \"{alg}\"\npublic_key_file = \"{file}\"\n{}",
                jwt_rule()
            ));
            let expected = format!("test.toml:5:19: identity.jwt.public_key_file: {message}");
            assert!(line.starts_with(&expected), "{line}\nwanted {expected}");
        }
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\n{}",
            jwt_rule()
        ));
        assert_eq!(line, "test.toml:3:1: identity.jwt.public_key_file: RS256 tokens need public_key_file = \"path/to/public.pem\" (or jwks_file = \"path/to/jwks.json\")");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn an_endless_key_file_is_refused_after_a_mebibyte() {
        // Seen with fuzz/config: `/dev/zero` was read until memory ran out.
        for key in ["public_key_file", "jwks_file"] {
            let line = only_error(&format!(
                "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\n{key} = \"/dev/zero\"\n{}",
                jwt_rule()
            ));
            assert!(
                line.ends_with(&format!(
                    "identity.jwt.{key}: cannot read /dev/zero: it is larger than 1024 KiB, \
                     which no key file is"
                )),
                "{line}"
            );
        }
    }

    #[test]
    fn a_jwks_file_is_the_other_way_to_give_public_keys() {
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = [\"RS256\", \"ES256\"]\n\
             jwks_file = \"tests/fixtures/jwt/jwks.json\"\n{}",
            jwt_rule()
        ));
        let jwt = config.identity.jwt.expect("identity.jwt");
        assert!(matches!(jwt.key, Some(JwtKey::Jwks(_))));

        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\n\
             public_key_file = \"tests/fixtures/jwt/rsa-public.pem\"\n\
             jwks_file = \"tests/fixtures/jwt/jwks.json\"\n{}",
            jwt_rule()
        ));
        assert_eq!(line, "test.toml:6:13: identity.jwt.jwks_file: give either public_key_file or jwks_file, not both");
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\n\
             jwks_file = \"tests/fixtures/jwt/jwks.json\"\n{}",
            jwt_rule()
        ));
        assert_eq!(line, "test.toml:5:13: identity.jwt.jwks_file: tests/fixtures/jwt/jwks.json key \"ec-1\" is for ES256, which algorithms (RS256) does not list");
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\n\
             jwks_file = \"tests/fixtures/jwt/rsa-public.pem\"\n{}",
            jwt_rule()
        ));
        assert!(line.starts_with("test.toml:5:13: identity.jwt.jwks_file: tests/fixtures/jwt/rsa-public.pem is not a JWKS"), "{line}");
        set_env("SLUICE_TEST_JWKS_SECRET", &"s".repeat(32));
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_JWKS_SECRET\"\n\
             jwks_file = \"tests/fixtures/jwt/jwks.json\"\n{}",
            jwt_rule()
        ));
        assert!(line.starts_with("test.toml:5:13: identity.jwt.jwks_file: HS256 tokens are verified with a shared secret (secret_env), not a public key; remove jwks_file"), "{line}");
    }

    #[test]
    fn a_relative_key_file_is_read_from_the_config_files_directory() {
        let dir = tempfile::tempdir().unwrap();
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jwt");
        std::fs::copy(fixtures.join("rsa-public.pem"), dir.path().join("key.pem")).unwrap();
        let path = dir.path().join("sluice.toml");
        std::fs::write(
            &path,
            format!(
                "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\npublic_key_file = \"key.pem\"\n{}",
                jwt_rule()
            ),
        )
        .unwrap();
        Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn the_key_must_fit_the_algorithm_family() {
        set_env("SLUICE_TEST_FAMILY_SECRET", &"s".repeat(32));
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_FAMILY_SECRET\"\n\
             public_key_file = \"tests/fixtures/jwt/rsa-public.pem\"\n{}",
            jwt_rule()
        ));
        assert!(line.starts_with("test.toml:5:19: identity.jwt.public_key_file: HS256 tokens are verified with a shared secret (secret_env), not a public key"), "{line}");
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = [\"ES256\"]\nsecret_env = \"SLUICE_TEST_FAMILY_SECRET\"\n\
             public_key_file = \"tests/fixtures/jwt/ec256-public.pem\"\n{}",
            jwt_rule()
        ));
        assert!(line.starts_with("test.toml:5:14: identity.jwt.secret_env: ES256 tokens are verified with a public key (public_key_file or jwks_file), not a shared secret"), "{line}");
    }

    #[test]
    fn verify_false_needs_no_key_and_is_a_warning() {
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_NEVER_SET\"\nverify = false\n{}",
            jwt_rule()
        ));
        let jwt = config.identity.jwt.expect("identity.jwt");
        assert!(!jwt.verify);
        assert!(jwt.key.is_none());
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert!(
            config.warnings[0].starts_with("test.toml:5:10: identity.jwt.verify: tokens are read without checking their signature"),
            "{}",
            config.warnings[0]
        );
    }

    #[test]
    fn a_bad_header_name_is_an_error() {
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nheader = \"not a header\"\nverify = false\n{}",
            jwt_rule()
        ));
        assert_eq!(line, "test.toml:4:10: identity.jwt.header: \"not a header\" is not a valid header name (default \"authorization\")");
    }
}
