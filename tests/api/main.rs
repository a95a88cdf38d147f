//! HTTP/SSE end-to-end tests: each test starts a kernel in-process (a fresh SQLite store, or a
//! fresh PostgreSQL database with `KEEL_TEST_BACKEND=postgres`; random port) and drives it over
//! real HTTP with scripted agents and runners.

mod agents;
mod amplification;
mod approvals;
mod backend;
mod breakers;
mod budgets;
mod concurrency;
mod connections;
mod console;
mod credentials;
mod cross_site;
mod early_answers;
mod errors;
mod executions;
mod exposition;
mod exposure;
mod failures;
mod feed;
mod guardrails;
mod harness;
mod hooks;
mod hostile;
mod hostile_text;
mod identity;
mod llm;
mod llm_budget;
mod llm_fallback;
mod llm_holder;
mod metrics;
mod openapi;
mod outage;
mod outbound;
mod replay;
mod restart;
mod runners;
mod slow_clients;
mod sse;
mod step_reports;
mod tls;
mod webhooks;
