//! What a doctor check says, and what it looks at: the verdict type both
//! the engines' doctor and the NVIDIA toolkit's doctor return, and the host
//! they read (a view of the tree, the programs on PATH, Docker's version).
use super::dockerver::DockerVersion;
use super::fsutil::FsView;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Worth knowing, not a failure (e.g. an engine that is not installed).
    Info,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub verdict: Verdict,
    pub text: String,
}

/// What the host has: `program(name)` says whether a program is on PATH.
pub struct Host<'a> {
    pub fs: &'a dyn FsView,
    pub program: &'a dyn Fn(&str) -> bool,
    pub docker_version: Option<DockerVersion>,
    /// `env_requests` of the gpu-quota configuration in use.
    pub env_requests: bool,
}
