//! The agent and label conditions of a [`ListFilter`], shared by the execution list and the
//! counts by status on both backends (executions aliased `e`).

use sqlx::{Database, Encode, QueryBuilder, Type};

use keel_actors::store::ListFilter;

/// Appends ` AND e.agent_id = ?` and one `EXISTS` per label to `query`.
pub(super) fn push_agent_and_labels<'args, DB>(
    query: &mut QueryBuilder<'args, DB>,
    filter: &'args ListFilter,
) where
    DB: Database,
    &'args str: Encode<'args, DB> + Type<DB>,
{
    if let Some(agent_id) = &filter.agent_id {
        query
            .push(" AND e.agent_id = ")
            .push_bind(agent_id.as_str());
    }
    for (key, value) in &filter.labels {
        query
            .push(" AND EXISTS (SELECT 1 FROM execution_labels AS l")
            .push(" WHERE l.execution_id = e.id AND l.key = ")
            .push_bind(key.as_str())
            .push(" AND l.value = ")
            .push_bind(value.as_str())
            .push(")");
    }
}
