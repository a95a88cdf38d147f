//! Tests of hot reload on a real kernel (memory store): a good change takes effect, a bad one
//! keeps the old policy, Kubernetes ConfigMap symlink swaps and symlinked files are picked up,
//! a forced reload (the SIGHUP path) reloads an unchanged policy, and the reload metric counts
//! every outcome. Decisions are observed through `invoke_tool` intents on the kernel handle.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use keel_actors::execution::{Intent, IntentReply};
use keel_actors::ids::{AgentId, ConsumerId, ExecutionId, SessionId};
use keel_actors::kernel::PushStream;
use keel_actors::testing::{MemoryStore, TestKernel, eventually};
use serde_json::json;

use super::watch::{relevant, watch_targets};
use super::{PolicyReloader, ReloadOptions, load_path};

const WAIT: Duration = Duration::from_secs(10);

/// `deploy` is allowed; everything else falls to the default (deny).
const ALLOW_DEPLOY: &str = "rules:\n  - id: deploy-ok\n    priority: 1\n    when:\n      tool_id: deploy\n    then:\n      decision: allow\n";

/// `deploy` is denied by a rule.
const DENY_DEPLOY: &str = "rules:\n  - id: deploy-frozen\n    priority: 1\n    when:\n      tool_id: deploy\n    then:\n      decision: deny\n      reason: release freeze\n";

/// Not a policy: an unknown key.
const BROKEN: &str = "rules:\n  - id: deploy-ok\n    priority: 1\n    wen:\n      tool_id: deploy\n    then:\n      decision: allow\n";

/// A kernel on the policy at `path`, an agent with one running execution, and the reloader.
struct Setup {
    kernel: TestKernel,
    reloader: PolicyReloader,
    execution: ExecutionId,
    session: SessionId,
    _stream: PushStream,
}

impl Setup {
    async fn start(path: &Path) -> Self {
        let loaded = load_path(path).expect("initial policy loads");
        let kernel = TestKernel::start_with(
            Arc::new(MemoryStore::default()),
            loaded.engine.clone(),
            |_| {},
        )
        .await;
        let options = ReloadOptions {
            debounce: Duration::from_millis(50),
            sighup: false,
        };
        let reloader = PolicyReloader::start(
            kernel.kernel.clone(),
            path.to_path_buf(),
            loaded.digest,
            options,
        );
        let mut stream = kernel
            .kernel
            .connect_agent(AgentId::new("ops"), ConsumerId::new("ops-1"))
            .await
            .expect("agent connects");
        let row = kernel
            .kernel
            .create_execution(AgentId::new("ops"), json!(null), None)
            .await
            .expect("execution created");
        let assigned = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("assigned in time")
            .expect("assignment");
        let session = SessionId::new(assigned.data["session_id"].as_str().expect("session"));
        Self {
            kernel,
            reloader,
            execution: row.id,
            session,
            _stream: stream,
        }
    }

    /// Asks for `deploy` and returns the answer.
    async fn deploy(&self) -> IntentReply {
        let intent = Intent::InvokeTool {
            tool_id: "deploy".into(),
            arguments: json!({}),
            idempotency_key: None,
            remote: false,
        };
        self.kernel
            .kernel
            .submit_intent(&self.execution, &self.session, intent)
            .await
            .expect("intent answered")
    }

    /// Returns the reload counter for `result`.
    fn reloads(&self, result: &str) -> u64 {
        reload_count(&self.kernel.kernel.encode_metrics(), result)
    }

    /// Waits until the reload counter for `result` reaches `count`.
    async fn wait_reloads(&self, result: &str, count: u64) {
        let reached = eventually(WAIT, || async {
            (self.reloads(result) >= count).then_some(())
        })
        .await;
        assert!(
            reached.is_some(),
            "{result} reloads did not reach {count}: {}",
            self.kernel.kernel.encode_metrics()
        );
    }

    async fn stop(self) {
        self.reloader.stop().await;
        self.kernel.shutdown().await;
    }
}

/// Reads `keel_policy_reloads_total{result="..."}` from the exposition (0 when absent).
fn reload_count(metrics: &str, result: &str) -> u64 {
    let prefix = format!("keel_policy_reloads_total{{result=\"{result}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// Replaces `path` the way editors do: write a temporary file, then rename it over the old one.
fn save(path: &Path, text: &str) {
    let temporary = path.with_extension("tmp~");
    std::fs::write(&temporary, text).expect("write");
    std::fs::rename(&temporary, path).expect("rename");
}

fn denied_by(reply: &IntentReply) -> Option<&str> {
    (!reply.accepted).then_some(reply.error.as_deref().unwrap_or_default())
}

#[tokio::test]
async fn a_good_change_takes_effect_and_a_bad_one_keeps_the_old_policy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, DENY_DEPLOY).expect("write");
    let setup = Setup::start(&path).await;
    assert_eq!(
        denied_by(&setup.deploy().await),
        Some("policy denied: release freeze (rule: deploy-frozen)")
    );

    save(&path, ALLOW_DEPLOY);
    setup.wait_reloads("ok", 1).await;
    assert!(
        setup.deploy().await.accepted,
        "the new policy allows deploy"
    );

    save(&path, BROKEN);
    setup.wait_reloads("error", 1).await;
    assert!(
        setup.deploy().await.accepted,
        "a broken file leaves the last good policy in force"
    );

    // In-place writes (no rename) are picked up too.
    std::fs::write(&path, DENY_DEPLOY).expect("write");
    setup.wait_reloads("ok", 2).await;
    assert!(denied_by(&setup.deploy().await).is_some());
    assert_eq!((setup.reloads("ok"), setup.reloads("error")), (2, 1));
    let metrics = setup.kernel.kernel.encode_metrics();
    assert!(
        metrics
            .contains(r#"keel_policy_decisions_total{decision="deny",rule_id="deploy-frozen"} 2"#),
        "{metrics}"
    );
    setup.stop().await;
}

#[tokio::test]
async fn a_forced_reload_reloads_an_unchanged_policy_and_unrelated_files_are_ignored() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, ALLOW_DEPLOY).expect("write");
    let setup = Setup::start(&path).await;
    setup.reloader.reload_now();
    setup.wait_reloads("ok", 1).await;
    // A file next to the policy changes: not a policy change.
    std::fs::write(dir.path().join("notes.txt"), "hello").expect("write");
    // The same content saved again: the digest is unchanged, nothing is reloaded.
    save(&path, ALLOW_DEPLOY);
    setup.reloader.reload_now();
    setup.wait_reloads("ok", 2).await;
    assert_eq!((setup.reloads("ok"), setup.reloads("error")), (2, 0));
    assert!(setup.deploy().await.accepted);
    setup.stop().await;
}

/// Writes a ConfigMap-style volume: `..<version>/<files>`, `..data -> ..<version>`, and one
/// `<name> -> ..data/<name>` link per file.
#[cfg(unix)]
fn configmap(dir: &Path, version: &str, files: &[(&str, &str)]) {
    let data = dir.join(version);
    std::fs::create_dir(&data).expect("data dir");
    for (name, text) in files {
        std::fs::write(data.join(name), text).expect("write");
        let link = dir.join(name);
        if !link.exists() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), link).expect("link");
        }
    }
    // The kubelet's atomic swap: a new link renamed over `..data`.
    let temporary = dir.join("..data_tmp");
    std::os::unix::fs::symlink(version, &temporary).expect("link");
    std::fs::rename(&temporary, dir.join("..data")).expect("swap");
}

#[cfg(unix)]
#[tokio::test]
async fn a_configmap_symlink_swap_reloads_a_policy_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    configmap(dir.path(), "..2026_01_01", &[("_global.yaml", DENY_DEPLOY)]);
    let setup = Setup::start(dir.path()).await;
    assert!(denied_by(&setup.deploy().await).is_some());

    configmap(
        dir.path(),
        "..2026_01_02",
        &[("_global.yaml", ALLOW_DEPLOY)],
    );
    std::fs::remove_dir_all(dir.path().join("..2026_01_01")).expect("old data removed");
    setup.wait_reloads("ok", 1).await;
    assert!(setup.deploy().await.accepted);
    assert_eq!(setup.reloads("error"), 0);
    setup.stop().await;
}

#[cfg(unix)]
#[tokio::test]
async fn a_configmap_mounted_file_and_a_symlinked_file_are_reloaded() {
    // `--policy /etc/keel/policy.yaml` where the file is a ConfigMap key.
    let volume = tempfile::tempdir().expect("temp dir");
    configmap(volume.path(), "..v1", &[("policy.yaml", DENY_DEPLOY)]);
    let setup = Setup::start(&volume.path().join("policy.yaml")).await;
    configmap(volume.path(), "..v2", &[("policy.yaml", ALLOW_DEPLOY)]);
    setup.wait_reloads("ok", 1).await;
    assert!(setup.deploy().await.accepted);
    setup.stop().await;

    // A policy file that is a symlink to a file in another directory, edited there.
    let real = tempfile::tempdir().expect("temp dir");
    let links = tempfile::tempdir().expect("temp dir");
    let target: PathBuf = real.path().join("actual.yaml");
    std::fs::write(&target, ALLOW_DEPLOY).expect("write");
    let link = links.path().join("policy.yaml");
    std::os::unix::fs::symlink(&target, &link).expect("link");
    let setup = Setup::start(&link).await;
    std::fs::write(&target, DENY_DEPLOY).expect("write");
    setup.wait_reloads("ok", 1).await;
    assert!(denied_by(&setup.deploy().await).is_some());
    setup.stop().await;
}

/// Returns a file event of `kind` about `names` in `dir`.
fn event(kind: notify::EventKind, dir: &Path, names: &[&str]) -> notify::Event {
    names.iter().fold(notify::Event::new(kind), |event, name| {
        event.add_path(dir.join(name))
    })
}

#[test]
fn only_events_that_may_change_the_policy_trigger_a_reload() {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, ModifyKind, RenameMode};
    let dir = Path::new("/etc/keel");
    let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
    let file_names = [std::ffi::OsString::from("policy.yaml")].into();
    let file_mode = Some(&file_names);
    // File mode: the policy file and ConfigMap `..` entries, never other files or reads.
    assert!(relevant(&event(write, dir, &["policy.yaml"]), file_mode));
    assert!(relevant(
        &event(EventKind::Create(CreateKind::Any), dir, &["..data_tmp"]),
        file_mode
    ));
    let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
    assert!(relevant(
        &event(rename, dir, &["policy.yaml.tmp", "policy.yaml"]),
        file_mode
    ));
    let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
    assert!(relevant(&event(closed, dir, &["policy.yaml"]), file_mode));
    assert!(
        !relevant(&event(write, dir, &["kernel.log"]), file_mode),
        "a log next to the policy"
    );
    let opened = EventKind::Access(AccessKind::Open(AccessMode::Any));
    assert!(
        !relevant(&event(opened, dir, &["policy.yaml"]), file_mode),
        "the kernel's own read"
    );
    // Directory mode: YAML files and `..` entries.
    assert!(relevant(&event(write, dir, &["support-bot.yaml"]), None));
    assert!(relevant(&event(write, dir, &["_global.yml"]), None));
    assert!(relevant(
        &event(EventKind::Any, dir, &["..2026_01_02"]),
        None
    ));
    assert!(!relevant(&event(write, dir, &["kernel.log"]), None));
    assert!(!relevant(&event(opened, dir, &["support-bot.yaml"]), None));
    // An event without paths (a rescan) may mean anything.
    assert!(relevant(&notify::Event::new(EventKind::Any), None));
}

#[cfg(unix)]
#[test]
fn watch_targets_follow_symlinks_out_of_the_policy_directory() {
    let real = tempfile::tempdir().expect("temp dir");
    let links = tempfile::tempdir().expect("temp dir");
    std::fs::write(real.path().join("actual.yaml"), ALLOW_DEPLOY).expect("write");
    let link = links.path().join("policy.yaml");
    std::os::unix::fs::symlink(real.path().join("actual.yaml"), &link).expect("link");
    let targets = watch_targets(&link);
    let real_dir = std::fs::canonicalize(real.path()).expect("canonical");
    assert_eq!(
        targets.dirs,
        [links.path().to_path_buf(), real_dir].into_iter().collect()
    );
    assert_eq!(
        targets.names,
        ["actual.yaml", "policy.yaml"]
            .map(std::ffi::OsString::from)
            .into()
    );
    // A directory's own files add no directory to watch.
    let targets = watch_targets(links.path());
    assert_eq!(
        targets.dirs.len(),
        2,
        "the directory and the link's target directory"
    );
}
