//! The validated settings mapped onto each part a kernel process starts: the actor tree's
//! configuration, the HTTP layer's, the allowed hosts, and the LLM gateway.

use std::sync::Arc;

use anyhow::anyhow;
use keel_actors::execution::ExecutionSettings;
use keel_actors::kernel::KernelConfig;
use keel_actors::policy::PolicyEngine;
use keel_actors::store::Store;

use super::KERNEL_SHARE_OF_DEADLINE;
use crate::config::Settings;
use crate::http::{DEFAULT_HEARTBEAT, HttpSettings};

/// Maps the settings onto the actor tree's configuration.
pub(super) fn kernel_config(
    settings: &Settings,
    store: Arc<dyn Store>,
    policy: Arc<dyn PolicyEngine>,
) -> KernelConfig {
    let mut config = KernelConfig::new(store, policy);
    config.execution = ExecutionSettings {
        step_timeout: settings.step_timeout,
        execution_timeout: settings.execution_timeout,
        retry_base_delay: settings.retry_base_delay,
        retry_max_delay: settings.retry_max_delay,
        stall_after: settings.stall_after,
        job_start_timeout: settings.job_start_timeout,
        ..ExecutionSettings::default()
    };
    config.agent_grace = settings.agent_timeout;
    config.passivate_after = Some(settings.passivate_after);
    config.runner_grace = settings.runner_timeout;
    config.retention_period = settings.retention_period;
    config.cleanup_interval = settings.cleanup_interval;
    config.metrics_max_ids = settings.metrics_max_ids;
    config.shutdown_timeout = settings.shutdown_timeout / KERNEL_SHARE_OF_DEADLINE;
    if settings.otel_endpoint.is_some() {
        config.traces = Some(Arc::new(crate::trace_context::OtelTraceContext));
    }
    config
}

/// Maps the settings onto the HTTP layer's configuration.
pub(super) fn http_settings(settings: &Settings) -> HttpSettings {
    HttpSettings {
        bearer_token: settings
            .bearer_token
            .as_ref()
            .map(|token| token.expose().to_owned()),
        cors_origins: settings.cors_origins.clone(),
        body_limit: settings.body_limit,
        large_body_limit: settings.large_body_limit,
        heartbeat: DEFAULT_HEARTBEAT,
        body_read_timeout: settings.body_read_timeout,
        backlog: crate::http::creation::Backlog {
            per_agent: (settings.max_pending_per_agent > 0)
                .then_some(settings.max_pending_per_agent),
            total: (settings.max_pending > 0).then_some(settings.max_pending),
            retry_after_secs: settings.backlog_retry_after.as_secs_f64().ceil().max(1.0) as u64,
            strict_agents: settings.strict_agents,
        },
        feed: crate::http::feed::FeedSettings {
            buffer_bytes: settings.exposure.stream_buffer_bytes,
            ..crate::http::feed::FeedSettings::default()
        },
        gateway: None,
        cluster: None,
        labels: crate::http::text::LabelLimits {
            max_count: settings.max_labels,
            max_value_bytes: settings.max_label_value_bytes,
        },
        allowed_hosts: allowed_hosts(settings),
        max_page_bytes: settings.exposure.max_page_bytes,
    }
}

/// `--allowed-hosts` and the cluster's advertised host (the other kernels forward with it).
fn allowed_hosts(settings: &Settings) -> crate::http::hosts::AllowedHosts {
    let mut names = settings.exposure.allowed_hosts.clone();
    let advertised = settings
        .cluster
        .as_ref()
        .and_then(|cluster| url::Url::parse(&cluster.advertise_url).ok())
        .and_then(|url| url.host_str().map(str::to_ascii_lowercase));
    names.extend(advertised);
    crate::http::hosts::AllowedHosts {
        always: !settings.exposure.allowed_hosts.is_empty(),
        names,
    }
}

/// The LLM gateway of `--llm-config` and `--llm-cassette` (`None`: off), and how to name it in
/// the start-up line.
pub(super) fn llm_gateway(
    settings: &Settings,
) -> anyhow::Result<(Option<Arc<crate::gateway::Gateway>>, String)> {
    use crate::gateway::{Gateway, GatewayConfig, cassette::Cassette};
    if settings.llm_config.is_none() && settings.llm_cassette.is_none() {
        return Ok((None, "off".to_owned()));
    }
    let config = match &settings.llm_config {
        Some(path) => GatewayConfig::load(path),
        None => Ok(GatewayConfig {
            providers: std::collections::BTreeMap::new(),
        }),
    };
    let mut gateway = config
        .and_then(Gateway::new)
        .map_err(|error| anyhow!("{error}; refusing to start"))?;
    let mut in_force = format!(
        "providers {}",
        gateway
            .config
            .providers
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(path) = &settings.llm_cassette {
        let cassette =
            Cassette::load(path).map_err(|error| anyhow!("{error}; refusing to start"))?;
        in_force = format!(
            "cassette {} ({} calls; no provider is called)",
            path.display(),
            cassette.providers().values().sum::<usize>()
        );
        gateway = gateway.with_cassette(cassette);
    }
    Ok((Some(Arc::new(gateway)), in_force))
}
