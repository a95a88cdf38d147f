//! The `Debug` form of [`Config`]: every flag, with the database URL's credentials and the
//! bearer token redacted, so a logged configuration leaks no secret.

use std::fmt;

use super::{Config, redact, values};

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("mode", &self.mode)
            .field("bind", &self.bind)
            .field("port", &self.port)
            .field("data_dir", &self.data_dir)
            .field("db_url", &self.db_url.as_deref().map(redact::redact_url))
            .field("db_max_conns", &self.db_max_conns)
            .field("cluster", &self.cluster)
            .field("node_id", &self.node_id)
            .field("advertise_url", &self.advertise_url)
            .field("partitions", &self.partitions)
            .field("no_notify", &self.no_notify)
            .field("policy", &self.policy)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| values::REDACTED),
            )
            .field("production", &self.production)
            .field("cors_origins", &self.cors_origins)
            .field("step_timeout", &self.step_timeout)
            .field("execution_timeout", &self.execution_timeout)
            .field("agent_timeout", &self.agent_timeout)
            .field("runner_timeout", &self.runner_timeout)
            .field("retry_base_delay", &self.retry_base_delay)
            .field("retry_max_delay", &self.retry_max_delay)
            .field("stall_after", &self.stall_after)
            .field("job_start_timeout", &self.job_start_timeout)
            .field("retention_period", &self.retention_period)
            .field("cleanup_interval", &self.cleanup_interval)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("body_limit", &self.body_limit)
            .field("large_body_limit", &self.large_body_limit)
            .field("max_pending_per_agent", &self.max_pending_per_agent)
            .field("strict_agents", &self.strict_agents)
            .field("max_pending", &self.max_pending)
            .field("metrics_max_ids", &self.metrics_max_ids)
            .field("max_labels", &self.max_labels)
            .field("max_label_value_bytes", &self.max_label_value_bytes)
            .field("backlog_retry_after", &self.backlog_retry_after)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("exposure", &self.exposure)
            .field("log_level", &self.log_level)
            .field("log_format", &self.log_format)
            .field("dump_config", &self.dump_config)
            .finish_non_exhaustive()
    }
}
