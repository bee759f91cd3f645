//! `jwt:<claim>` keys over real HTTP, with tokens minted here: valid HS256,
//! RS256 and ES256 tokens key each caller by its claim; every token that
//! does not verify (forged signature, `alg: none`, expired, not yet valid,
//! an algorithm off the list, garbage, oversized, no `Bearer`) is a missing
//! key, handled by the rule's `missing` policy, and never touches the
//! bucket of the caller it claims to be (hostile-input row D6 in docs/edge-behaviour.md). With a JWKS,
//! the token's `kid` picks the key.

use crate::support;

use std::sync::Once;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use support::{assert_problem, get, start, unix_now, Got, Sluice, Upstream};

/// The HMAC secret, handed to sluice (in this process) through `SECRET_ENV`.
const SECRET: &str = "integration-test-secret-0123456789abcdef";
const SECRET_ENV: &str = "SLUICE_TEST_JWT_SECRET";

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwt");
const RSA_PRIVATE: &[u8] = include_bytes!("../fixtures/jwt/rsa-private.pem");
const RSA_PUBLIC: &[u8] = include_bytes!("../fixtures/jwt/rsa-public.pem");
const RSA_FORGER: &[u8] = include_bytes!("../fixtures/jwt/rsa-other-private.pem");
const EC_PRIVATE: &[u8] = include_bytes!("../fixtures/jwt/ec256-private.pem");

/// Sets the secret's variable once for this test binary, before any sluice
/// reads it; every test sets the same value, so order does not matter.
fn provide_secret() {
    static SET: Once = Once::new();
    SET.call_once(|| std::env::set_var(SECRET_ENV, SECRET));
}

/// sluice with HS256 tokens and one rule, `per-seller`, keyed on `key`.
async fn start_hs256(key: &str, missing: &str) -> (Upstream, Sluice) {
    provide_secret();
    start(&format!(
        r#"
[identity.jwt]
secret_env = "{SECRET_ENV}"

[[rule]]
name = "per-seller"
key = "{key}"
rate = "3/m"
missing = "{missing}"
"#
    ))
    .await
}

/// sluice with `alg` tokens checked against the public key in `file`.
async fn start_public_key(alg: &str, file: &str, missing: &str) -> (Upstream, Sluice) {
    start(&format!(
        r#"
[identity.jwt]
algorithms = ["{alg}"]
public_key_file = "{FIXTURES}/{file}"

[[rule]]
name = "per-seller"
key = "jwt:seller_id"
rate = "3/m"
missing = "{missing}"
"#
    ))
    .await
}

fn claims_for(seller: &str) -> Value {
    json!({"seller_id": seller, "exp": unix_now() + 3600})
}

fn mint(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
    encode(&Header::new(alg), claims, key).unwrap()
}

fn hs256(claims: &Value) -> String {
    mint(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET.as_bytes()),
        claims,
    )
}

fn rs256(claims: &Value) -> String {
    mint(
        Algorithm::RS256,
        &EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap(),
        claims,
    )
}

/// Unpadded base64url, for tokens no library would sign.
fn b64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `Authorization` values that must never verify, each claiming to be
/// `victim`, for a sluice verifying HS256 with `SECRET` (or, with
/// `rsa = true`, RS256 with the fixture key). `None` sends no header.
fn forgeries(victim: &str, rsa: bool) -> Vec<(&'static str, Option<String>)> {
    let now = unix_now();
    let genuine = |claims: &Value| if rsa { rs256(claims) } else { hs256(claims) };
    let valid = genuine(&claims_for(victim));
    let payload = b64(claims_for(victim).to_string().as_bytes());
    let unsigned = format!("{}.{payload}.", b64(br#"{"alg":"none","typ":"JWT"}"#));
    let forged_signature = if rsa {
        mint(
            Algorithm::RS256,
            &EncodingKey::from_rsa_pem(RSA_FORGER).unwrap(),
            &claims_for(victim),
        )
    } else {
        mint(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"not the secret, but a good guess"),
            &claims_for(victim),
        )
    };
    let wrong_algorithm = if rsa {
        // Algorithm confusion: HMAC keyed with the public key.
        mint(
            Algorithm::HS256,
            &EncodingKey::from_secret(RSA_PUBLIC),
            &claims_for(victim),
        )
    } else {
        mint(
            Algorithm::HS384,
            &EncodingKey::from_secret(SECRET.as_bytes()),
            &claims_for(victim),
        )
    };
    // The victim's payload under someone else's valid signature.
    let other = genuine(&claims_for("attacker"));
    let parts: Vec<&str> = other.split('.').collect();
    let spliced = format!("{}.{payload}.{}", parts[0], parts[2]);
    let oversized = genuine(&json!({
        "seller_id": victim,
        "exp": now + 3600,
        "padding": "x".repeat(9 * 1024),
    }));
    vec![
        ("forged signature", Some(bearer(&forged_signature))),
        ("alg none", Some(bearer(&unsigned))),
        (
            "expired",
            Some(bearer(&genuine(
                &json!({"seller_id": victim, "exp": now - 3600}),
            ))),
        ),
        (
            "not yet valid",
            Some(bearer(&genuine(
                &json!({"seller_id": victim, "exp": now + 7200, "nbf": now + 3600}),
            ))),
        ),
        ("wrong algorithm", Some(bearer(&wrong_algorithm))),
        ("spliced payload", Some(bearer(&spliced))),
        ("oversized", Some(bearer(&oversized))),
        ("garbage", Some("Bearer not.a.token".to_owned())),
        ("no Bearer prefix", Some(valid)),
        ("no header", None),
    ]
}

async fn get_as(sluice: &Sluice, authorization: Option<&str>) -> Got {
    match authorization {
        Some(value) => get(&sluice.url("/"), &[("authorization", value)]).await,
        None => get(&sluice.url("/"), &[]).await,
    }
}

async fn statuses_as(sluice: &Sluice, authorization: &str, n: usize) -> Vec<u16> {
    let mut codes = Vec::with_capacity(n);
    for _ in 0..n {
        codes.push(get_as(sluice, Some(authorization)).await.status.as_u16());
    }
    codes
}

fn remaining(got: &Got) -> u64 {
    got.header("x-ratelimit-remaining")
        .unwrap_or_else(|| panic!("no X-RateLimit-Remaining on {got:?}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hs256_tokens_give_each_seller_its_own_bucket() {
    let (upstream, sluice) = start_hs256("jwt:seller_id", "shared").await;
    let alice = bearer(&hs256(&claims_for("alice")));
    let bob = bearer(&hs256(&claims_for("bob")));

    assert_eq!(statuses_as(&sluice, &alice, 4).await, [200, 200, 200, 429]);
    assert_eq!(statuses_as(&sluice, &bob, 1).await, [200]);
    // The token is forwarded untouched: the upstream may still use it.
    let seen = upstream.seen();
    assert_eq!(
        seen.last().unwrap().headers.get("authorization").unwrap(),
        bob.as_str()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs256_tokens_give_each_seller_its_own_bucket() {
    let (_upstream, sluice) = start_public_key("RS256", "rsa-public.pem", "shared").await;
    let alice = bearer(&rs256(&claims_for("alice")));
    let bob = bearer(&rs256(&claims_for("bob")));

    assert_eq!(statuses_as(&sluice, &alice, 4).await, [200, 200, 200, 429]);
    assert_eq!(statuses_as(&sluice, &bob, 2).await, [200, 200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn es256_tokens_give_each_seller_its_own_bucket() {
    let (_upstream, sluice) = start_public_key("ES256", "ec256-public.pem", "shared").await;
    let key = EncodingKey::from_ec_pem(EC_PRIVATE).unwrap();
    let alice = bearer(&mint(Algorithm::ES256, &key, &claims_for("alice")));
    let bob = bearer(&mint(Algorithm::ES256, &key, &claims_for("bob")));

    assert_eq!(statuses_as(&sluice, &alice, 4).await, [200, 200, 200, 429]);
    assert_eq!(statuses_as(&sluice, &bob, 1).await, [200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_and_numeric_claims_key_by_their_text() {
    let (_upstream, sluice) = start_hs256("jwt:org.id", "reject").await;
    let exp = unix_now() + 3600;
    let number = bearer(&hs256(&json!({"org": {"id": 42}, "exp": exp})));
    let text = bearer(&hs256(&json!({"org": {"id": "42"}, "exp": exp})));
    let other = bearer(&hs256(&json!({"org": {"id": 7}, "exp": exp})));
    let flat = bearer(&hs256(&json!({"org": 42, "exp": exp})));

    assert_eq!(statuses_as(&sluice, &number, 2).await, [200, 200]);
    // 42 and "42" are the same caller: one request left between them.
    assert_eq!(statuses_as(&sluice, &text, 2).await, [200, 429]);
    assert_eq!(statuses_as(&sluice, &other, 1).await, [200]);
    // `org` is not an object here: the claim is missing.
    assert_problem(&get_as(&sluice, Some(&flat)).await, StatusCode::BAD_REQUEST);
}

/// Every forgery goes to the one shared bucket of requests without a key,
/// and the victim's own bucket is untouched.
async fn forgeries_share_the_missing_bucket(sluice: &Sluice, victim_token: &str, rsa: bool) {
    let first = get_as(sluice, Some(victim_token)).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(remaining(&first), 2);

    let mut forged = Vec::new();
    for (what, authorization) in forgeries("victim", rsa) {
        forged.push((what, get_as(sluice, authorization.as_deref()).await.status));
    }
    let admitted: Vec<_> = forged
        .iter()
        .filter(|(_, s)| *s == StatusCode::OK)
        .collect();
    assert_eq!(
        admitted.len(),
        3,
        "the shared bucket admits its 3, then limits: {forged:?}"
    );
    assert!(
        forged
            .iter()
            .all(|(_, s)| *s == StatusCode::OK || *s == StatusCode::TOO_MANY_REQUESTS),
        "{forged:?}"
    );

    let again = get_as(sluice, Some(victim_token)).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(remaining(&again), 1, "no forgery was charged to the victim");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hs256_forgeries_are_missing_keys_sharing_one_bucket() {
    let (_upstream, sluice) = start_hs256("jwt:seller_id", "shared").await;
    let victim = bearer(&hs256(&claims_for("victim")));
    forgeries_share_the_missing_bucket(&sluice, &victim, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs256_forgeries_and_algorithm_confusion_are_missing_keys() {
    let (_upstream, sluice) = start_public_key("RS256", "rsa-public.pem", "shared").await;
    let victim = bearer(&rs256(&claims_for("victim")));
    forgeries_share_the_missing_bucket(&sluice, &victim, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_missing_reject_every_forgery_gets_a_400_problem_document() {
    let (upstream, sluice) = start_hs256("jwt:seller_id", "reject").await;

    for (what, authorization) in forgeries("victim", false) {
        let got = get_as(&sluice, authorization.as_deref()).await;
        let body = assert_problem(&got, StatusCode::BAD_REQUEST);
        assert!(
            body["detail"].as_str().unwrap().contains("jwt:seller_id"),
            "{what}: the detail names the source: {body}"
        );
    }
    assert_eq!(upstream.count(), 0, "no forgery reaches the upstream");

    let valid = bearer(&hs256(&claims_for("victim")));
    assert_eq!(statuses_as(&sluice, &valid, 1).await, [200]);
    let missing = r#"sluice_requests_total{rule="per-seller",outcome="missing_key"}"#;
    assert_eq!(sluice.metric(missing).await, 10.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_missing_skip_forgeries_pass_unlimited_and_unkeyed() {
    let (_upstream, sluice) = start_hs256("jwt:seller_id", "skip").await;

    for _ in 0..2 {
        for (what, authorization) in forgeries("victim", false) {
            let got = get_as(&sluice, authorization.as_deref()).await;
            assert_eq!(got.status, StatusCode::OK, "{what}");
            assert!(got.header("x-ratelimit-remaining").is_none(), "{what}");
        }
    }
    let valid = bearer(&hs256(&claims_for("victim")));
    assert_eq!(statuses_as(&sluice, &valid, 4).await, [200, 200, 200, 429]);
    let tracked = r#"sluice_tracked_keys{rule="per-seller"}"#;
    assert_eq!(
        sluice.metric(tracked).await,
        1.0,
        "only the victim's bucket"
    );
}

/// Hostile-input row D6: 1,000 forged requests claiming the victim's id leave
/// its remaining budget unchanged and create no bucket of their own (the
/// one bucket that appears is the shared one of requests without a key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_forgeries_leave_the_victims_budget_unchanged() {
    provide_secret();
    let (_upstream, sluice) = start(&format!(
        r#"
[identity.jwt]
secret_env = "{SECRET_ENV}"

[[rule]]
name = "per-seller"
key = "jwt:seller_id"
rate = "100/h"
missing = "shared"
"#
    ))
    .await;
    let victim = bearer(&hs256(&claims_for("victim")));
    let before = remaining(&get_as(&sluice, Some(&victim)).await);
    assert_eq!(before, 99);

    // One keep-alive connection, so the run stays short.
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let forgeries = forgeries("victim", false);
    let mut admitted = 0;
    for i in 0..1000 {
        let mut request = Request::get(sluice.url("/"));
        if let Some(value) = &forgeries[i % forgeries.len()].1 {
            request = request.header("authorization", value);
        }
        let response = client
            .request(request.body(Full::new(Bytes::new())).unwrap())
            .await
            .unwrap();
        if response.status() == StatusCode::OK {
            admitted += 1;
        }
        response.into_body().collect().await.unwrap();
    }

    let after = remaining(&get_as(&sluice, Some(&victim)).await);
    assert_eq!(after, before - 1, "only the victim's own request counted");
    assert_eq!(
        admitted, 100,
        "forgeries get the shared bucket's 100, no more"
    );
    let tracked = r#"sluice_tracked_keys{rule="per-seller"}"#;
    assert_eq!(
        sluice.metric(tracked).await,
        2.0,
        "the victim's bucket and the shared one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_without_jwt_keys_never_need_a_token() {
    provide_secret();
    let (_upstream, sluice) = start(&format!(
        r#"
[identity.jwt]
secret_env = "{SECRET_ENV}"

[[rule]]
name = "per-ip"
rate = "2/m"

[[rule]]
name = "per-seller"
match = {{ path_prefix = "/sellers" }}
key = "jwt:seller_id"
rate = "1/m"
missing = "reject"
"#
    ))
    .await;

    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let seller = bearer(&hs256(&claims_for("alice")));
    let got = get(&sluice.url("/sellers/1"), &[("authorization", &seller)]).await;
    assert_eq!(got.status, StatusCode::OK);
    let got = get(&sluice.url("/sellers/1"), &[]).await;
    assert_problem(&got, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_file_verifies_rs256_and_es256_tokens_by_kid() {
    let (_upstream, sluice) = start(&format!(
        r#"
[identity.jwt]
algorithms = ["RS256", "ES256"]
jwks_file = "{FIXTURES}/jwks.json"

[[rule]]
name = "per-seller"
key = "jwt:seller_id"
rate = "3/m"
missing = "reject"
"#
    ))
    .await;
    let with_kid = |alg, kid: Option<&str>, key: &EncodingKey, seller: &str| {
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_owned);
        bearer(&encode(&header, &claims_for(seller), key).unwrap())
    };
    let rsa = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let ec = EncodingKey::from_ec_pem(EC_PRIVATE).unwrap();
    let alice = with_kid(Algorithm::RS256, Some("rsa-1"), &rsa, "alice");
    let bob = with_kid(Algorithm::ES256, Some("ec-1"), &ec, "bob");

    assert_eq!(statuses_as(&sluice, &alice, 4).await, [200, 200, 200, 429]);
    assert_eq!(statuses_as(&sluice, &bob, 1).await, [200]);
    // No kid with two keys, an unknown or path-like kid, a key used for
    // another algorithm than its own: missing, so 400.
    for forged in [
        with_kid(Algorithm::RS256, None, &rsa, "bob"),
        with_kid(Algorithm::RS256, Some("rsa-2"), &rsa, "bob"),
        with_kid(Algorithm::RS256, Some("../../rsa-1"), &rsa, "bob"),
        with_kid(Algorithm::RS256, Some("ec-1"), &rsa, "bob"),
        with_kid(
            Algorithm::RS256,
            Some("rsa-1"),
            &EncodingKey::from_rsa_pem(RSA_FORGER).unwrap(),
            "bob",
        ),
    ] {
        assert_problem(
            &get_as(&sluice, Some(&forged)).await,
            StatusCode::BAD_REQUEST,
        );
    }
    assert_eq!(statuses_as(&sluice, &bob, 2).await, [200, 200]);
}
