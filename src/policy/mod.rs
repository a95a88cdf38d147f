//! Policy loading: parses `--policy FILE|DIR` (strict YAML, every problem reported as
//! `FILE:LINE: message`), compiles it with `keel_actors::policy::rules`, and provides the
//! `keel policy check` and `keel policy eval` commands. The policy actor receives the result
//! as an `Arc<dyn PolicyEngine>`; [`PolicyReloader`] reloads it when the files change or on
//! SIGHUP, keeping the old engine when a reload fails.

mod cli;
mod digest;
mod directory;
mod errors;
mod hooks;
mod load;
mod locate;
mod reload;
#[cfg(test)]
mod reload_tests;
mod spec;
mod spec_approval;
mod spec_arguments;
mod spec_rule;
mod status;
#[cfg(test)]
mod tests;
mod watch;

pub use cli::{check_command, eval_command};
pub use directory::GLOBAL_STEM;
pub use errors::{PolicyLoadErrors, PolicyProblem};
pub use load::{LoadedPolicy, load_path};
pub use reload::{DEFAULT_DEBOUNCE, PolicyReloader, ReloadOptions};
pub use status::{PolicySnapshot, PolicyStatus, ReloadOutcome};
