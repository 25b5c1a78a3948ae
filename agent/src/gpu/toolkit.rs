//! The NVIDIA Container Toolkit a GPU host runs: its version is checked before the agent takes
//! leases, because the toolkit's hooks run on the host with the container's environment, and
//! versions before 1.17.8 let an image's `ENV LD_PRELOAD` load code of the image's into the
//! `createContainer` hook as root on the host (CVE-2025-23266). The agent also refuses such
//! images itself (`crate::env::forbidden_in_image`); the toolkit's fix closes the hook.

use std::process::Command;

/// The oldest toolkit the agent runs leases with.
pub const MIN_VERSION: Version = Version(1, 17, 8);

/// A toolkit version: major, minor, patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolkitError {
    #[error("the NVIDIA Container Toolkit's `nvidia-ctk` is not installed (GPU leases need the toolkit {MIN_VERSION} or later)")]
    Missing,
    #[error("`nvidia-ctk --version` printed no version: {0:?}")]
    Unreadable(String),
    #[error("the NVIDIA Container Toolkit is {found}: versions before {MIN_VERSION} let an image's environment run code on the host (CVE-2025-23266); upgrade it")]
    TooOld { found: Version },
}

/// The version in `nvidia-ctk --version`'s output ("NVIDIA Container Toolkit CLI version
/// 1.17.8"): the first word after "version" that reads as major.minor.patch.
pub fn parse(text: &str) -> Option<Version> {
    let mut words = text
        .split_whitespace()
        .skip_while(|w| !w.eq_ignore_ascii_case("version"));
    words.next()?;
    let word = words.next()?;
    let mut parts = word
        .trim_start_matches('v')
        .split(['.', '-', '+', '~'])
        .map(|p| p.parse::<u32>());
    Some(Version(
        parts.next()?.ok()?,
        parts.next()?.ok()?,
        parts.next()?.ok()?,
    ))
}

/// Whether the toolkit's version `text` (what `nvidia-ctk --version` printed) is one leases may
/// run with.
pub fn judge(text: &str) -> Result<Version, ToolkitError> {
    let found = parse(text).ok_or_else(|| ToolkitError::Unreadable(text.trim().to_string()))?;
    if found < MIN_VERSION {
        return Err(ToolkitError::TooOld { found });
    }
    Ok(found)
}

/// This host's toolkit, judged.
pub fn check() -> Result<Version, ToolkitError> {
    let out = Command::new("nvidia-ctk")
        .arg("--version")
        .output()
        .map_err(|_| ToolkitError::Missing)?;
    judge(&String::from_utf8_lossy(&out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_before_the_fix_are_refused_and_later_ones_taken() {
        let printed =
            |v: &str| format!("NVIDIA Container Toolkit CLI version {v}\ncommit: 0a1b2c3\n");
        assert_eq!(judge(&printed("1.17.8")), Ok(Version(1, 17, 8)));
        assert_eq!(judge(&printed("1.18.0-rc.1")), Ok(Version(1, 18, 0)));
        assert_eq!(judge(&printed("2.0.1")), Ok(Version(2, 0, 1)));
        assert_eq!(
            judge(&printed("1.17.7")),
            Err(ToolkitError::TooOld {
                found: Version(1, 17, 7)
            })
        );
        assert_eq!(
            judge(&printed("1.9.10")),
            Err(ToolkitError::TooOld {
                found: Version(1, 9, 10)
            })
        );
        assert!(matches!(
            judge("nvidia-ctk: command output\n"),
            Err(ToolkitError::Unreadable(_))
        ));
    }
}
