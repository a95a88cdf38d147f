//! Reads bounded by bytes as well as by count (issue 38, item 4): a backlog of large events is
//! read a bounded amount at a time, whatever the count asked for. The SQL backends measure an
//! event by the bytes of its stored payload; a batch takes events while the ones before stay
//! under the budget, so it holds at least one event and passes the budget by at most one.

/// What a bounded read returned ([`super::Store::events_within`], [`super::Store::feed`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Batch<T> {
    /// What was read, in order.
    pub items: Vec<T>,
    /// Whether the read stopped at its count or at its byte budget: more may follow at once.
    /// `false` means it read everything there was.
    pub full: bool,
}

impl<T: serde::Serialize> Batch<T> {
    /// Like [`Batch::within`], measuring each item read as JSON (stores that cannot measure
    /// their rows before loading them).
    pub fn measured(items: Vec<T>, limit: i64, max_bytes: i64) -> Self {
        let mut through = 0_i64;
        let sized = items
            .into_iter()
            .map(|item| {
                let size = serde_json::to_vec(&item).map_or(0, |json| json.len());
                through = through.saturating_add(i64::try_from(size).unwrap_or(i64::MAX));
                (item, through)
            })
            .collect();
        Self::within(sized, limit, max_bytes)
    }
}

impl<T> Batch<T> {
    /// Takes `items` (read with `limit`, each with the running total of bytes through it)
    /// while the bytes before each stay under `max_bytes`, as the SQL backends do.
    pub fn within(items: Vec<(T, i64)>, limit: i64, max_bytes: i64) -> Self {
        let read = items.len();
        let mut full = i64::try_from(read).unwrap_or(i64::MAX) >= limit.max(0);
        let mut before = 0;
        let mut kept = Vec::with_capacity(read);
        for (item, through) in items {
            if before >= max_bytes && !kept.is_empty() {
                full = true;
                break;
            }
            full |= through >= max_bytes;
            before = through;
            kept.push(item);
        }
        Self { items: kept, full }
    }
}

#[cfg(test)]
mod tests {
    use super::Batch;

    #[test]
    fn a_batch_stops_once_it_passes_the_budget_and_holds_at_least_one_item() {
        let sized = |sizes: &[i64]| {
            let mut total = 0;
            sizes
                .iter()
                .enumerate()
                .map(|(index, size)| {
                    total += size;
                    (index, total)
                })
                .collect::<Vec<_>>()
        };
        // 10 + 10 reach the budget of 20: the third is left for the next batch.
        let batch = Batch::within(sized(&[10, 10, 10]), 100, 20);
        assert_eq!(
            batch,
            Batch {
                items: vec![0, 1],
                full: true
            }
        );
        // One item larger than the budget is read alone.
        let batch = Batch::within(sized(&[50, 1]), 100, 20);
        assert_eq!(
            batch,
            Batch {
                items: vec![0],
                full: true
            }
        );
        // Under both bounds: everything, and nothing more to read.
        let batch = Batch::within(sized(&[1, 2]), 100, 20);
        assert_eq!(
            batch,
            Batch {
                items: vec![0, 1],
                full: false
            }
        );
        // The count bound alone.
        let batch = Batch::within(sized(&[1, 2]), 2, 20);
        assert_eq!(
            batch,
            Batch {
                items: vec![0, 1],
                full: true
            }
        );
        // Measured as JSON (the default of stores that cannot measure before loading):
        // `"xxxxxxxxxx"` is 12 bytes, so a 24-byte budget takes two.
        let batch = Batch::measured(vec!["x".repeat(10); 3], 100, 24);
        assert_eq!((batch.items.len(), batch.full), (2, true));
        assert_eq!(
            Batch::within(Vec::<(u8, i64)>::new(), 5, 20),
            Batch {
                items: vec![],
                full: false
            }
        );
    }
}
