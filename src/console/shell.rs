//! The shell document every console page answers: navigation, an empty main region and the
//! sign-in form, no data. The script fills the main region from the page's view.

use axum::extract::State;
use axum::http::HeaderValue;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, html};

use crate::http::AppState;

/// Scripts and styles come from the kernel only; nothing may frame the console.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Adds the headers every console response carries.
pub fn harden(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// `GET /`, `/executions/{id}`, `/approvals`, `/directory`, `/status`, `/login`.
/// `data-auth="token"` tells the script to ask for the token before its first request (no
/// request is sent only to be refused); it reveals no more than any refused request would.
pub async fn page(State(state): State<AppState>) -> Response {
    let _ = state.keys.ensure_loaded().await;
    let auth = if state.settings.bearer_token.is_some() || state.keys.has_keys() {
        "token"
    } else {
        "none"
    };
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Keel console" }
                link rel="icon" href="data:,";
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/steps.js" defer {}
                script src="/console/assets/console.js" defer {}
            }
            body data-auth=(auth) {
                a class="skip" href="#app" { "Skip to content" }
                header class="top" {
                    span class="brand" { "Keel" }
                    nav aria-label="Console" {
                        ul {
                            li { a href="/" data-nav="executions" { "Executions" } }
                            li { a href="/approvals" data-nav="approvals" { "Approvals" } }
                            li { a href="/directory" data-nav="directory" { "Agents & runners" } }
                            li { a href="/status" data-nav="status" { "Health" } }
                        }
                    }
                    span id="whoami" hidden {}
                    button type="button" id="logout" hidden { "Sign out" }
                }
                div id="flash" role="status" aria-live="polite" {}
                main id="app" tabindex="-1" {
                    p class="muted" { "Loading…" }
                }
                section id="login" hidden aria-labelledby="login-title" {
                    h1 id="login-title" { "Sign in" }
                    p { "This kernel requires an API key (or its bearer token). It is kept in this tab's session storage only and sent as an Authorization header; the pages offer what the key's role allows." }
                    form id="login-form" {
                        input type="text" name="username" autocomplete="username" value="operator" hidden;
                        label for="token" { "API key or bearer token" }
                        input id="token" name="token" type="password" autocomplete="current-password" required;
                        button type="submit" { "Sign in" }
                    }
                    p id="login-error" role="alert" {}
                }
                noscript { p { "The Keel console needs JavaScript." } }
            }
        }
    };
    harden(Html(markup.into_string()).into_response())
}
