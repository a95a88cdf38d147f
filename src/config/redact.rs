//! Removes credentials from database URLs before they reach a log line, an error message or
//! `--dump-config`. It fails closed: a URL that does not parse is replaced whole.

use super::values::REDACTED;

/// Stands in for a secret while the URL is rebuilt (URL-safe, unlike `<redacted>`).
const PLACEHOLDER: &str = "KEEL-REDACTED-3f9c";

/// Query parameter names (lower-cased, `_` and `-` removed) that carry or point to a secret:
/// `password`, `sslpassword`, `passfile`, `sslkey`, tokens, ... A parameter matches when its
/// name contains one of these.
const SECRET_PARAMETERS: [&str; 7] = ["pass", "pwd", "secret", "token", "key", "cred", "auth"];

/// Returns `url` with its userinfo password, every query parameter whose name suggests a
/// secret, and any fragment replaced by `<redacted>`. A URL that does not parse as a URL is
/// replaced whole.
pub(crate) fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url.trim()) else {
        return REDACTED.to_owned();
    };
    if parsed.password().is_some() && parsed.set_password(Some(PLACEHOLDER)).is_err() {
        return REDACTED.to_owned();
    }
    if let Some(query) = parsed.query() {
        // Rebuilt piece by piece so that what is kept stays exactly as written.
        let redacted: Vec<String> = query
            .split('&')
            .map(|piece| {
                let raw_key = piece.split_once('=').map_or(piece, |(key, _)| key);
                let (key, _) = url::form_urlencoded::parse(piece.as_bytes())
                    .next()
                    .unwrap_or_default();
                if is_secret_parameter(&key) {
                    format!("{raw_key}={PLACEHOLDER}")
                } else {
                    piece.to_owned()
                }
            })
            .collect();
        parsed.set_query(Some(&redacted.join("&")));
    }
    if parsed.fragment().is_some() {
        parsed.set_fragment(Some(PLACEHOLDER));
    }
    parsed.as_str().replace(PLACEHOLDER, REDACTED)
}

/// Query parameters the PostgreSQL driver (sqlx 0.8) understands.
const POSTGRES_PARAMETERS: [&str; 17] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
];

/// Returns the names of the query parameters of a PostgreSQL URL the driver ignores
/// (`options` is understood too).
pub(crate) fn unrecognized_postgres_parameters(url: &str) -> Vec<String> {
    let Ok(parsed) = url::Url::parse(url.trim()) else {
        return Vec::new();
    };
    parsed
        .query_pairs()
        .map(|(key, _)| key.into_owned())
        .filter(|key| key != "options" && !POSTGRES_PARAMETERS.contains(&key.as_str()))
        .collect()
}

fn is_secret_parameter(name: &str) -> bool {
    let normalized: String = name
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_PARAMETERS
        .iter()
        .any(|secret| normalized.contains(secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_credential_form_is_redacted() {
        for (url, expected) in [
            (
                "postgres://keel:pw-456@db/keel",
                "postgres://keel:<redacted>@db/keel",
            ),
            (
                "postgresql://keel:p%40ss%3Aw@db:5433/keel?sslmode=require",
                "postgresql://keel:<redacted>@db:5433/keel?sslmode=require",
            ),
            (
                "postgres://keel@db/keel?password=pw-456&sslmode=verify-full",
                "postgres://keel@db/keel?password=<redacted>&sslmode=verify-full",
            ),
            (
                "postgres://db/keel?user=k&PassWord=pw-456&ssl_password=x&passfile=%2Fp&sslkey=%2Fk.pem&sslrootcert=%2Fca.pem",
                "postgres://db/keel?user=k&PassWord=<redacted>&ssl_password=<redacted>&passfile=<redacted>&sslkey=<redacted>&sslrootcert=%2Fca.pem",
            ),
            (
                "postgres://u:pw-456@db/keel?password=pw-456#pw-456",
                "postgres://u:<redacted>@db/keel?password=<redacted>#<redacted>",
            ),
            (
                "postgres://keel@localhost/keel?sslmode=verify-full&sslrootcert=/etc/ssl/ca.pem&password",
                "postgres://keel@localhost/keel?sslmode=verify-full&sslrootcert=/etc/ssl/ca.pem&password=<redacted>",
            ),
            ("postgres://keel@db/keel", "postgres://keel@db/keel"),
            ("sqlite:///tmp/keel.db", "sqlite:///tmp/keel.db"),
        ] {
            assert_eq!(redact_url(url), expected, "{url}");
        }
    }

    #[test]
    fn what_does_not_parse_is_redacted_whole() {
        for url in [
            "postgres://u:pw-456@h1:5432,h2:5432/db",
            "pw-456",
            "host=db password=pw-456",
            "postgres://u:pw-456@[::1/db",
            "",
        ] {
            assert_eq!(redact_url(url), REDACTED, "{url}");
        }
    }

    #[test]
    fn parameters_the_driver_ignores_are_named() {
        assert_eq!(
            unrecognized_postgres_parameters(
                "postgres://db/k?sslmode=require&sslpassword=pw-456&options=-c%20a%3Db&x=1"
            ),
            vec!["sslpassword".to_owned(), "x".to_owned()]
        );
        assert!(unrecognized_postgres_parameters("postgres://u:p@db/k").is_empty());
    }

    #[test]
    fn percent_encoded_parameter_names_are_recognised() {
        let redacted = redact_url("postgres://db/keel?pass%77ord=pw-456");
        assert!(!redacted.contains("pw-456"), "{redacted}");
    }
}
