//! Issue check 9, a rolling restart under load: each of three kernels in turn gets SIGTERM,
//! hands its partitions over, and is started again on the same address, while clients keep
//! creating and signalling executions on random kernels. The clients see no error but 503
//! with `Retry-After` (and refused connections while a kernel is down, which a load balancer
//! routes around), and every request answered 2xx is in the log exactly once.

use std::time::{Duration, Instant};

use super::harness::{Database, Kernel, poll};
use super::load::{Load, Targets};
use super::{BUDGET, owned_evenly_by};

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_restart_under_load_gives_clients_nothing_but_503_with_retry_after() {
    let Some(database) = Database::fresh().await else {
        return;
    };
    tokio::time::timeout(BUDGET, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut kernels = super::three_settled(&database, dir.path(), &["--cluster"]).await;
        let nodes = ["k1", "k2", "k3"];
        let targets: Targets = std::sync::Arc::new(std::sync::Mutex::new(
            kernels.iter().map(|kernel| kernel.url.clone()).collect(),
        ));
        let load = Load::start(targets, 4);
        tokio::time::sleep(Duration::from_secs(1)).await;

        let mut handovers = Vec::new();
        for index in 0..kernels.len() {
            let leaving = kernels.remove(index);
            let (node, port) = (leaving.node_id.clone(), leaving.port());
            let others: Vec<&str> = nodes.iter().copied().filter(|n| *n != node).collect();
            let signalled = Instant::now();
            let exit = tokio::spawn(leaving.terminate());
            // The others hold every partition well before the leaver's leases could lapse.
            let handed = poll(Duration::from_secs(4), || owned_evenly_by(&database, &others)).await;
            let handover = signalled.elapsed();
            let log = exit.await.expect("terminate task");
            assert!(handed.is_some(), "{node}'s partitions not taken over within 4 s:\n{log}");
            assert!(log.contains("left the cluster"), "log:\n{log}");
            println!("{node}: SIGTERM to the others holding every partition: {handover:?}");
            handovers.push(handover);

            let restarted =
                Kernel::start_on(&node, &database.url, &dir.path().join(&node), &["--cluster"], port)
                    .await
                    .unwrap_or_else(|log| panic!("{node} did not restart:\n{log}"));
            kernels.insert(index, restarted);
            // The restarted kernel gets its share back, and every kernel sees that.
            super::settled(&database, &kernels).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let tally = load.finish().await;
        println!(
            "load: {} operations ok, {} failed, {} answers 2xx, {} answers 503, {} refused connections, {} requests on closed connections retried ({:.3} of answers 2xx), errors {:?}",
            tally.operations_ok(),
            tally.failed_operations,
            tally.ok_answers,
            tally.unavailable_answers,
            tally.refused,
            tally.closed,
            tally.ok_answer_share(),
            tally.errors
        );
        handovers.sort();
        println!("hand-over after SIGTERM: {handovers:?}");
        assert!(tally.errors.is_empty(), "client errors: {:?}", tally.errors);
        assert!(tally.operations_ok() >= 100, "too little load got through");
        assert!(
            tally.ok_share() >= 0.95,
            "{:.3} of operations 2xx",
            tally.ok_share()
        );
        tally.verify(&database).await;
        for kernel in kernels {
            kernel.terminate().await;
        }
    })
    .await
    .expect("test within its budget");
}
