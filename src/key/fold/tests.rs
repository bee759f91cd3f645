use std::borrow::Cow;

use proptest::prelude::*;

use super::*;
use crate::key::path::normalize;

fn folded(path: &str, alike: PathsAlike) -> String {
    fold(path, alike).unwrap().into_owned()
}

fn assert_borrowed(path: &str, alike: PathsAlike) {
    match fold(path, alike) {
        Ok(Cow::Borrowed(same)) => assert_eq!(same, path),
        other => panic!("{path:?} should come back borrowed, got {other:?}"),
    }
}

const CASE: PathsAlike = PathsAlike {
    case: true,
    ..PathsAlike::NONE
};
const SLASH: PathsAlike = PathsAlike {
    trailing_slash: true,
    ..PathsAlike::NONE
};
const PARAMS: PathsAlike = PathsAlike {
    params: true,
    ..PathsAlike::NONE
};

#[test]
fn every_spelling_the_upstream_serves_as_login_folds_to_it() {
    for spelling in [
        "/login",
        "/login/",
        "/login;x=1",
        "/login/..;/login",
        "/Login",
        "/LOGIN/",
        "/LOGIN;JSESSIONID=1/",
        "/;x/login",
        "/login/.;x",
        "/a;v=2/..;/LOGIN",
    ] {
        assert_eq!(folded(spelling, PathsAlike::ALL), "/login", "{spelling}");
    }
}

#[test]
fn with_nothing_alike_every_path_is_matched_as_written() {
    for path in [
        "/login/",
        "/login;x=1",
        "/login/..;/login",
        "/Login",
        "/LOGIN/",
    ] {
        assert_borrowed(path, PathsAlike::NONE);
    }
}

#[test]
fn a_path_already_folded_is_borrowed_not_copied() {
    for path in [
        "/",
        "/login",
        "/api/v1/users/42",
        "/.well-known/openid-configuration",
        "/a-b_c~d.csv",
        // The hex of an escape is no letter of the path.
        "/a%2Fb",
        "/%C3%A9t%C3%A9",
        "/%E2%82%AC",
        "/été",
        // `%3B` is a character of the segment, not where parameters start.
        "/login%3Bx=1",
        // Broken escapes (never in a normalised path) are characters.
        "/%",
        "/%zz",
        "/%C3",
        "/%C3%28",
    ] {
        assert_borrowed(path, PathsAlike::ALL);
    }
}

#[test]
fn each_kind_folds_only_what_it_names() {
    let path = "/Api;v=1/Login/";
    assert_eq!(folded(path, CASE), "/api;v=1/login/");
    assert_eq!(folded(path, SLASH), "/Api;v=1/Login");
    assert_eq!(folded(path, PARAMS), "/Api/Login/");
    assert_eq!(folded(path, PathsAlike::ALL), "/api/login");
    assert_borrowed("/Login;x", SLASH);
    assert_borrowed("/login/;x", CASE);
    assert_borrowed("/LOGIN/", PARAMS);
}

#[test]
fn the_root_keeps_its_slash() {
    assert_borrowed("/", PathsAlike::ALL);
    assert_eq!(folded("/;x", PathsAlike::ALL), "/");
    assert_eq!(folded("/;x/", PathsAlike::ALL), "/");
    assert_eq!(folded("/a/..;", PathsAlike::ALL), "/");
    assert_eq!(folded("/a/..;/", PARAMS), "/");
}

#[test]
fn parameters_are_removed_from_every_segment_before_dots_resolve() {
    assert_eq!(folded("/a;v=1/b;c;d/e", PARAMS), "/a/b/e");
    assert_eq!(folded("/a/b/..;", PARAMS), "/a/");
    assert_eq!(folded("/a/b/..;", PathsAlike::ALL), "/a");
    assert_eq!(folded("/a/.;x/b", PARAMS), "/a/b");
    assert_eq!(folded("/a/;/b", PARAMS), "/a/b");
    // A segment that is only parameters leaves nothing: `/a/;x` is `/a/`.
    assert_eq!(folded("/a/;x", PARAMS), "/a/");
    // `..;` with more after it is not a dot segment once cut: `..;x` is `..`.
    assert_eq!(folded("/a/b/..;x/c", PARAMS), "/a/c");
    // A segment merely starting with dots stays.
    assert_eq!(folded("/a/...;x", PARAMS), "/a/...");
}

#[test]
fn climbing_above_the_root_through_parameters_is_refused() {
    for path in ["/..;/admin", "/..;x", "/a/..;/..;/b", "/;x/..;/b"] {
        assert_eq!(
            fold(path, PARAMS),
            Err(PathError::AboveRootWithParams),
            "{path}"
        );
    }
    // Without "params" `..;` is a name like any other.
    assert_borrowed(
        "/..;/admin",
        PathsAlike {
            params: false,
            ..PathsAlike::ALL
        },
    );
}

#[test]
fn letters_outside_ascii_are_lowered_in_the_form_they_were_written() {
    assert_eq!(folded("/CAF%C3%89", CASE), "/caf%C3%A9");
    assert_eq!(folded("/CAFÉ", CASE), "/café");
    // KELVIN SIGN lowers to an ASCII `k`, written as itself.
    assert_eq!(folded("/%E2%84%AAey", CASE), "/key");
    // LATIN CAPITAL I WITH DOT ABOVE lowers to two characters.
    assert_eq!(folded("/%C4%B0", CASE), "/i%CC%87");
    // Escapes of anything but a letter are kept as written.
    assert_eq!(folded("/A%2Fb%3B", CASE), "/a%2Fb%3B");
}

#[test]
fn the_names_read_and_write_back() {
    let mut alike = PathsAlike::NONE;
    for name in PathsAlike::NAMES {
        alike = alike.with(name).unwrap();
    }
    assert_eq!(alike, PathsAlike::ALL);
    assert_eq!(PathsAlike::default(), PathsAlike::ALL);
    assert_eq!(PathsAlike::ALL.names(), PathsAlike::NAMES);
    assert_eq!(PARAMS.names(), ["params"]);
    assert!(PathsAlike::NONE.names().is_empty());
    assert_eq!(PathsAlike::NONE.with("Case"), None);
    assert_eq!(
        PathsAlike::ALL.keeping_trailing_slash().names(),
        ["case", "params"]
    );
}

/// Lowering is stable: what a letter lowers to lowers to itself, so a
/// folded path folds to itself.
#[test]
fn every_lowered_character_is_already_lower() {
    for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
        for lower in c.to_lowercase() {
            assert!(
                !case::lowers(lower),
                "{c:?} lowers to {lower:?}, which lowers again"
            );
        }
    }
}

/// Every way of `alike`, by its bits.
fn kinds(bits: u8) -> PathsAlike {
    PathsAlike {
        case: bits & 1 != 0,
        trailing_slash: bits & 2 != 0,
        params: bits & 4 != 0,
    }
}

/// Paths built of the pieces folding looks at.
fn spelled() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "/",
        "/",
        "/",
        "a",
        "B",
        "z",
        ".",
        "..",
        ";",
        "=",
        "%3B",
        "%2F",
        "%C3%89",
        "%c3%a9",
        "É",
        "%E2%84%AA",
        "%C4%B0",
        "%41",
        "%2e",
        "x;y",
        "..;",
    ]);
    prop::collection::vec(piece, 0..12).prop_map(|pieces| format!("/{}", pieces.concat()))
}

proptest! {
    #[test]
    fn a_folded_path_is_normal_and_folds_to_itself(raw in spelled(), bits in 0u8..8) {
        let alike = kinds(bits);
        let Ok(normal) = normalize(&raw) else { return Ok(()) };
        let Ok(once) = fold(&normal, alike) else { return Ok(()) };
        match normalize(&once) {
            Ok(Cow::Borrowed(same)) => prop_assert_eq!(same, &*once),
            other => prop_assert!(false, "{:?} -> {:?} is not normal: {:?}", normal, once, other),
        }
        match fold(&once, alike) {
            Ok(Cow::Borrowed(same)) => prop_assert_eq!(same, &*once),
            other => prop_assert!(false, "{:?} -> {:?} folds again: {:?}", normal, once, other),
        }
        if let Cow::Owned(changed) = &once {
            prop_assert_ne!(changed, &*normal, "allocated for a path already folded");
        }
    }

    #[test]
    fn folding_any_text_never_panics(raw in ".{0,24}", bits in 0u8..8) {
        let _ = fold(&raw, kinds(bits));
    }
}
