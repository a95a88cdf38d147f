//! What the policy reloader watches and what wakes it: the directories to watch (following
//! symlinks out of the policy directory, as Kubernetes ConfigMaps use them), which file-system
//! events matter, and SIGHUP.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher};
use tokio::sync::mpsc;
use tracing::warn;

use super::reload::Trigger;

/// Creates the file watcher; its events become [`Trigger::Changed`]. `names` says which file
/// names matter in file mode (updated after every reload).
pub(super) fn start_watcher(
    path: &Path,
    names: Arc<RwLock<BTreeSet<OsString>>>,
    triggers: mpsc::UnboundedSender<Trigger>,
) -> Option<RecommendedWatcher> {
    let file_mode = !path.is_dir();
    let handler = move |event: notify::Result<Event>| {
        let relevant = match &event {
            Ok(event) => {
                let names = names.read().unwrap_or_else(PoisonError::into_inner);
                relevant(event, file_mode.then_some(&*names))
            }
            // Lost events (queue overflow): the files may have changed.
            Err(_) => true,
        };
        if relevant {
            let _ = triggers.send(Trigger::Changed);
        }
    };
    match notify::recommended_watcher(handler) {
        Ok(watcher) => Some(watcher),
        Err(watch_error) => {
            warn!(policy = %path.display(), error = %watch_error, "cannot watch for policy changes; SIGHUP still reloads");
            None
        }
    }
}

/// Returns whether a file event may change the policy. Reads never do. The hidden `..`
/// entries of a ConfigMap volume (`..data`) always may. Otherwise, in file mode (`names`
/// given) only events about the policy file or its symlink target count, and in directory mode
/// only events about `*.yaml`/`*.yml` files — so a log file written next to the policy cannot
/// trigger reloads.
pub(super) fn relevant(event: &Event, names: Option<&BTreeSet<OsString>>) -> bool {
    if let EventKind::Access(kind) = event.kind
        && kind != AccessKind::Close(AccessMode::Write)
    {
        return false;
    }
    event.paths.is_empty()
        || event.paths.iter().any(|changed| {
            let Some(name) = changed.file_name() else {
                return true;
            };
            if name.to_string_lossy().starts_with("..") {
                return true;
            }
            match names {
                Some(names) => names.contains(name),
                None => is_yaml(changed),
            }
        })
}

/// Returns whether a path names a YAML file (`.yaml` or `.yml`).
fn is_yaml(path: &Path) -> bool {
    path.extension()
        .is_some_and(|extension| extension == "yaml" || extension == "yml")
}

/// Returns the directory that holds the policy: the path itself, or the file's directory.
fn base_dir(path: &Path) -> PathBuf {
    if path.is_dir() {
        return path.to_path_buf();
    }
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// What to watch: directories, and (for file mode) the file names that matter in them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Targets {
    /// Directories to watch.
    pub dirs: BTreeSet<PathBuf>,
    /// File names whose events matter in file mode.
    pub names: BTreeSet<OsString>,
}

/// Returns what to watch: the base directory and the real directory of every policy file that
/// is a symlink to somewhere outside it; the names are the policy file's and its target's.
pub(super) fn watch_targets(path: &Path) -> Targets {
    let base = base_dir(path);
    let real_base = fs::canonicalize(&base).unwrap_or_else(|_| base.clone());
    let files: Vec<PathBuf> = if path.is_dir() {
        fs::read_dir(path)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .filter(|file| is_yaml(file))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        vec![path.to_path_buf()]
    };
    let mut targets = Targets {
        dirs: BTreeSet::from([base]),
        names: BTreeSet::new(),
    };
    for file in files {
        targets
            .names
            .extend(file.file_name().map(OsStr::to_os_string));
        if let Ok(real) = fs::canonicalize(&file) {
            targets
                .names
                .extend(real.file_name().map(OsStr::to_os_string));
            if let Some(dir) = real.parent()
                && !dir.starts_with(&real_base)
            {
                targets.dirs.insert(dir.to_path_buf());
            }
        }
    }
    targets
}

#[cfg(unix)]
pub(super) type Hangup = tokio::signal::unix::Signal;
#[cfg(not(unix))]
pub(super) type Hangup = std::future::Pending<()>;

/// Installs the SIGHUP handler; `None` (logged) when it cannot be installed.
#[cfg(unix)]
pub(super) fn hangup_signal() -> Option<Hangup> {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(hangup) => Some(hangup),
        Err(signal_error) => {
            warn!(error = %signal_error, "cannot install the SIGHUP handler; the policy reloads on file changes only");
            None
        }
    }
}

#[cfg(not(unix))]
pub(super) fn hangup_signal() -> Option<Hangup> {
    None
}

/// Resolves on the next SIGHUP; never without a handler.
pub(super) async fn next_hangup(hangup: &mut Option<Hangup>) {
    #[cfg(unix)]
    if let Some(hangup) = hangup.as_mut()
        && hangup.recv().await.is_some()
    {
        return;
    }
    #[cfg(not(unix))]
    let _ = hangup;
    std::future::pending::<()>().await;
}
