//! Hot reload of `--policy`: the kernel watches the policy path and reloads it when it changes,
//! and on SIGHUP. A policy that loads replaces the engine in force (rate-limit windows are
//! kept); one that does not is reported problem by problem in the log and the old policy stays
//! in force. Every attempt is logged with the policy digest and counted in
//! `keel_policy_reloads_total{result="ok|error"}`.
//!
//! What is watched (non-recursively): the policy directory itself, or the directory holding the
//! policy file, plus the real directory of every policy file reached through a symlink outside
//! it. Watching directories rather than files is what makes Kubernetes ConfigMap updates work:
//! the kubelet writes a new hidden `..<timestamp>` directory and atomically renames a `..data`
//! symlink over the old one, so the files themselves never change. Editors that save by
//! writing a temporary file and renaming it are covered the same way. Events are debounced
//! (a save is often several events) and a change that leaves the policy digest unchanged is
//! ignored; SIGHUP always reloads.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use keel_actors::kernel::Kernel;
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::errors::PolicyLoadErrors;
use super::load::{LoadedPolicy, load_path};
use super::status::PolicyStatus;
use super::watch::{Hangup, Targets, hangup_signal, next_hangup, start_watcher, watch_targets};

/// Quiet time after the last file event before the policy is reloaded.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(250);

/// Settings of the reloader.
#[derive(Clone, Copy, Debug)]
pub struct ReloadOptions {
    /// Quiet time after the last file event before reloading.
    pub debounce: Duration,
    /// Whether SIGHUP reloads (unix). Tests leave it off: a signal reaches the whole process.
    pub sighup: bool,
}

impl Default for ReloadOptions {
    fn default() -> Self {
        Self {
            debounce: DEFAULT_DEBOUNCE,
            sighup: true,
        }
    }
}

/// Why a reload runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Trigger {
    /// A watched directory changed: reload after the debounce, if the digest changed.
    Changed,
    /// SIGHUP or [`PolicyReloader::reload_now`]: reload at once, even when unchanged.
    Forced,
}

/// The running reloader: a task that watches the policy path and listens for SIGHUP.
pub struct PolicyReloader {
    triggers: mpsc::UnboundedSender<Trigger>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl PolicyReloader {
    /// Starts watching `path` for `kernel`; `digest` is the digest of the policy in force.
    /// Must be called inside the tokio runtime. A path that cannot be watched is logged, and
    /// SIGHUP still reloads.
    pub fn start(kernel: Kernel, path: PathBuf, digest: String, options: ReloadOptions) -> Self {
        Self::start_with_status(kernel, path, digest, options, None)
    }

    /// [`PolicyReloader::start`], recording every reload attempt in `status`.
    pub fn start_with_status(
        kernel: Kernel,
        path: PathBuf,
        digest: String,
        options: ReloadOptions,
        status: Option<Arc<PolicyStatus>>,
    ) -> Self {
        let (triggers, receiver) = mpsc::unbounded_channel();
        let names = Arc::new(RwLock::new(BTreeSet::new()));
        let watcher = start_watcher(&path, names.clone(), triggers.clone());
        let hangup = options.sighup.then(hangup_signal).flatten();
        let stop = CancellationToken::new();
        let reloads = Reloads {
            kernel,
            shown: path.display().to_string(),
            path,
            digest,
            watcher,
            watched: BTreeSet::new(),
            names,
            last_failure: None,
            status,
        };
        let task = tokio::spawn(reloads.run(receiver, hangup, options.debounce, stop.clone()));
        Self {
            triggers,
            stop,
            task,
        }
    }

    /// Starts the SIGHUP listener of a kernel without `--policy`: a hangup is logged (there is
    /// nothing to reload) instead of ending the process, so `systemctl reload` is harmless.
    pub fn without_policy(options: ReloadOptions) -> Self {
        let (triggers, mut receiver) = mpsc::unbounded_channel();
        let mut hangup = options.sighup.then(hangup_signal).flatten();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stopped.cancelled() => return,
                    trigger = receiver.recv() => if trigger.is_none() { return },
                    () = next_hangup(&mut hangup) => {}
                }
                info!("reload requested, but no --policy was given: nothing to reload");
            }
        });
        Self {
            triggers,
            stop,
            task,
        }
    }

    /// Reloads now, as SIGHUP does (even when the files did not change).
    pub fn reload_now(&self) {
        let _ = self.triggers.send(Trigger::Forced);
    }

    /// Stops watching and waits for a reload in progress to finish.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// The reloader task's state.
struct Reloads {
    kernel: Kernel,
    path: PathBuf,
    shown: String,
    /// Digest of the policy in force.
    digest: String,
    watcher: Option<RecommendedWatcher>,
    watched: BTreeSet<PathBuf>,
    /// File names that matter in file mode, shared with the watcher's handler.
    names: Arc<RwLock<BTreeSet<OsString>>>,
    /// The problems of the last failed reload, so that the same failure is reported once.
    last_failure: Option<String>,
    /// Where operators read the outcome of each attempt.
    status: Option<Arc<PolicyStatus>>,
}

impl Reloads {
    async fn run(
        mut self,
        mut triggers: mpsc::UnboundedReceiver<Trigger>,
        mut hangup: Option<Hangup>,
        debounce: Duration,
        stop: CancellationToken,
    ) {
        self.rewatch(watch_targets(&self.path));
        loop {
            let trigger = tokio::select! {
                () = stop.cancelled() => return,
                trigger = triggers.recv() => match trigger {
                    Some(trigger) => trigger,
                    None => return,
                },
                () = next_hangup(&mut hangup) => {
                    info!(policy = %self.shown, "SIGHUP received: reloading the policy");
                    Trigger::Forced
                }
            };
            let mut forced = trigger == Trigger::Forced;
            if !forced {
                // Wait for the burst of events of one save to end.
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(debounce) => break,
                        more = triggers.recv() => match more {
                            Some(more) => forced |= more == Trigger::Forced,
                            None => return,
                        },
                    }
                }
            }
            let targets = self.reload(forced).await;
            self.rewatch(targets);
        }
    }

    /// Loads the policy off the runtime, installs it when it loads, and returns what to watch.
    async fn reload(&mut self, forced: bool) -> Targets {
        let path = self.path.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            let loaded = load_path(&path);
            (loaded, watch_targets(&path))
        })
        .await;
        let (loaded, targets) = match loaded {
            Ok(result) => result,
            Err(join_error) => {
                error!(policy = %self.shown, error = %join_error, "policy reload task failed; the previous policy stays in force");
                self.kernel.metrics().policy_reload("error");
                return watch_targets(&self.path);
            }
        };
        match loaded {
            Ok(policy) => self.install(policy, forced),
            Err(errors) => self.refuse(&errors, forced),
        }
        targets
    }

    fn install(&mut self, policy: LoadedPolicy, forced: bool) {
        self.last_failure = None;
        if !forced && policy.digest == self.digest {
            debug!(policy = %self.shown, digest = %policy.digest, "policy files changed but the policy did not; nothing to reload");
            if let Some(status) = &self.status {
                status.unchanged();
            }
            return;
        }
        for warning in &policy.warnings {
            warn!(policy = %self.shown, warning = %warning, "policy warning");
        }
        self.kernel
            .replace_policy(policy.engine.clone(), policy.hooks.clone());
        self.kernel.metrics().policy_reload("ok");
        if let Some(status) = &self.status {
            status.installed(policy.engine.as_ref());
        }
        info!(
            policy = %self.shown,
            digest = %policy.digest,
            previous_digest = %self.digest,
            files = policy.files.len(),
            warnings = policy.warnings.len(),
            "policy reloaded"
        );
        self.digest = policy.digest;
    }

    fn refuse(&mut self, errors: &PolicyLoadErrors, forced: bool) {
        let failure = errors.to_string();
        if !forced && self.last_failure.as_ref() == Some(&failure) {
            debug!(policy = %self.shown, "policy files changed but the policy still has the same problems");
            return;
        }
        self.last_failure = Some(failure);
        if let Some(status) = &self.status {
            status.refused(errors.problems.iter().map(ToString::to_string).collect());
        }
        for problem in &errors.problems {
            error!(policy = %self.shown, problem = %problem, "policy problem");
        }
        self.kernel.metrics().policy_reload("error");
        error!(
            policy = %self.shown,
            problems = errors.problems.len(),
            digest = %self.digest,
            "policy reload failed; the previous policy stays in force"
        );
    }

    /// Watches the target directories, stops watching those no longer among them, and hands
    /// the relevant file names to the watcher.
    fn rewatch(
        &mut self,
        Targets {
            dirs: targets,
            names,
        }: Targets,
    ) {
        *self.names.write().unwrap_or_else(PoisonError::into_inner) = names;
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        for gone in self.watched.difference(&targets) {
            let _ = watcher.unwatch(gone);
        }
        self.watched.retain(|dir| targets.contains(dir));
        for dir in targets {
            if self.watched.contains(&dir) {
                continue;
            }
            match watcher.watch(&dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    debug!(policy = %self.shown, directory = %dir.display(), "watching for policy changes");
                    self.watched.insert(dir);
                }
                Err(watch_error) => warn!(
                    policy = %self.shown,
                    directory = %dir.display(),
                    error = %watch_error,
                    "cannot watch for policy changes; SIGHUP still reloads"
                ),
            }
        }
    }
}
