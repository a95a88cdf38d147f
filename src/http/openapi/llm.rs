//! OpenAPI paths of the LLM gateway (docs/llm.md) and the MCP endpoint (docs/mcp.md), both
//! bound to one execution. Their bodies are the provider's or MCP's own wire formats, passed
//! through, so the document describes them as open JSON.

#![allow(dead_code)] // The items only carry the attributes.

#[utoipa::path(post, path = "/v0/executions/{id}/llm/{provider}/v1/chat/completions",
    tag = "llm",
    params(("id" = String, Path, description = "Execution id"),
        ("provider" = String, Path, description = "Provider name from the gateway configuration")),
    request_body(content = Object, description = "An OpenAI chat completions request, forwarded \
        byte for byte"),
    responses(
        (status = 200, description = "The provider's answer (JSON, or `text/event-stream` with \
            `\"stream\": true`)", body = Object),
        (status = 403, description = "Not the execution's holder, a model outside the policy's \
            allow-list, or a spent budget (OpenAI error shape)", body = Object),
        (status = 404, description = "Gateway off, unknown provider or execution, a route of the \
            other format, or a call not in the cassette", body = Object),
        (status = 429, description = "No slot within the provider's limits", body = Object),
        (status = 502, description = "The provider cannot be reached", body = Object),
        (status = 503, description = "The provider's breaker is open", body = Object),
    ))]
pub(super) fn chat_completions() {}

#[utoipa::path(post, path = "/v0/executions/{id}/llm/{provider}/v1/embeddings", tag = "llm",
    params(("id" = String, Path, description = "Execution id"),
        ("provider" = String, Path, description = "Provider name (OpenAI format)")),
    request_body(content = Object, description = "An OpenAI embeddings request"),
    responses(
        (status = 200, description = "The provider's answer", body = Object),
        (status = 403, description = "Refused before the provider (OpenAI error shape)",
            body = Object),
        (status = 404, description = "Gateway off, unknown provider or execution", body = Object),
    ))]
pub(super) fn embeddings() {}

#[utoipa::path(post, path = "/v0/executions/{id}/llm/{provider}/v1/messages", tag = "llm",
    params(("id" = String, Path, description = "Execution id"),
        ("provider" = String, Path, description = "Provider name (Anthropic format)")),
    request_body(content = Object, description = "An Anthropic messages request"),
    responses(
        (status = 200, description = "The provider's answer (JSON, or `text/event-stream`)",
            body = Object),
        (status = 403, description = "Refused before the provider (Anthropic error shape)",
            body = Object),
        (status = 404, description = "Gateway off, unknown provider or execution", body = Object),
    ))]
pub(super) fn messages() {}

macro_rules! unknown_llm_route {
    ($name:ident, $method:ident) => {
        #[utoipa::path($method, path = "/v0/executions/{id}/llm/{provider}/{rest}", tag = "llm",
            params(("id" = String, Path, description = "Execution id"),
                ("provider" = String, Path, description = "Provider name"),
                ("rest" = String, Path, description = "Any other path")),
            responses((status = 404, description = "`unknown_route`: the gateway forwards only \
                the routes above; the message names the path", body = Object)))]
        pub(super) fn $name() {}
    };
}
unknown_llm_route!(unknown_get, get);
unknown_llm_route!(unknown_post, post);
unknown_llm_route!(unknown_put, put);
unknown_llm_route!(unknown_patch, patch);
unknown_llm_route!(unknown_delete, delete);

macro_rules! mcp_route {
    ($name:ident, $method:ident, $what:literal) => {
        #[utoipa::path($method, path = "/v0/executions/{id}/mcp", tag = "mcp",
            params(("id" = String, Path, description = "Execution id")),
            responses(
                (status = 200, description = $what, body = Object),
                (status = 403, description = "The caller does not hold the execution",
                    body = super::schemas::Error),
                (status = 404, description = "No such execution", body = super::schemas::Error),
                (status = 409, description = "The execution has finished",
                    body = super::schemas::Error),
            ))]
        pub(super) fn $name() {}
    };
}
mcp_route!(
    mcp_post,
    post,
    "An MCP (streamable HTTP) message answered: the execution's tools \
    as MCP tools, each call an intent of the execution"
);
mcp_route!(
    mcp_get,
    get,
    "MCP streamable HTTP: Keel keeps no MCP session, so no server stream"
);
mcp_route!(
    mcp_delete,
    delete,
    "MCP streamable HTTP session end (no session is kept)"
);
