//! `--dump-config`: the effective configuration as JSON, secrets redacted.

use serde_json::{Value, json};

use super::bytes::format_byte_size;
use super::format_duration;
use super::validate::Settings;
use super::values::REDACTED;

impl Settings {
    /// Returns the effective configuration as JSON, secrets redacted (`--dump-config`).
    pub fn dump(&self) -> Value {
        let mut dump = json!({
            "mode": self.mode.as_str(),
            "bind": self.listen.ip().to_string(),
            "port": self.listen.port(),
            "data-dir": self.data_dir.display().to_string(),
            "db-url": self.db.redacted(),
            "db-max-conns": self.db_max_conns,
            "cluster": self.cluster.is_some(),
            "node-id": self.cluster.as_ref().map(|cluster| cluster.node_id.as_str()),
            "advertise-url": self.cluster.as_ref().map(|cluster| cluster.advertise_url.as_str()),
            "partitions": self.cluster.as_ref().map(|cluster| cluster.partitions),
            "policy": self.policy.as_ref().map(|path| path.display().to_string()),
            "webhooks": self.webhooks.as_ref().map(|path| path.display().to_string()),
            "llm-config": self.llm_config.as_ref().map(|path| path.display().to_string()),
            "bearer-token": self.bearer_token.as_ref().map(|_| REDACTED),
            "production": self.production,
            "cors-origins": self.cors_origins,
            "step-timeout": format_duration(self.step_timeout),
            "execution-timeout": format_duration(self.execution_timeout),
            "agent-timeout": format_duration(self.agent_timeout),
            "runner-timeout": format_duration(self.runner_timeout),
            "retry-base-delay": format_duration(self.retry_base_delay),
            "retry-max-delay": format_duration(self.retry_max_delay),
            "stall-after": format_duration(self.stall_after),
            "job-start-timeout": format_duration(self.job_start_timeout),
            "passivate-after": format_duration(self.passivate_after),
            "retention-period": format_duration(self.retention_period.unwrap_or_default()),
            "cleanup-interval": format_duration(self.cleanup_interval),
            "shutdown-timeout": format_duration(self.shutdown_timeout),
            "body-limit": format_byte_size(self.body_limit),
            "large-body-limit": format_byte_size(self.large_body_limit),
            "max-pending-per-agent": self.max_pending_per_agent,
            "strict-agents": self.strict_agents,
            "max-pending": self.max_pending,
            "metrics-max-ids": self.metrics_max_ids,
            "backlog-retry-after": format_duration(self.backlog_retry_after),
            "header-read-timeout": format_duration(self.header_read_timeout),
            "body-read-timeout": format_duration(self.body_read_timeout),
            "idle-timeout": format_duration(self.idle_timeout),
            "log-level": self.log_filter,
            "log-format": self.log_format,
            "otel-endpoint": self.otel_endpoint,
        });
        // Outside the macro above, which is at its recursion limit.
        if let Some(fields) = dump.as_object_mut() {
            fields.insert(
                "llm-cassette".to_owned(),
                json!(
                    self.llm_cassette
                        .as_ref()
                        .map(|path| path.display().to_string())
                ),
            );
            fields.insert(
                "no-notify".to_owned(),
                json!(self.cluster.as_ref().map(|cluster| !cluster.notify)),
            );
        }
        self.exposure.dump_into(&mut dump);
        dump
    }
}
