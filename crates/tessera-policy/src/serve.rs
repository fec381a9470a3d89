//! How an iod serves reads (`tessera iod --serve`): what the server does with it is the iod's
//! (`tessera_iod::store`); the names are here, below both the iod and the supervisor
//! (`tessera-cluster`, which starts iods with `--serve MODE`).

use std::str::FromStr;

/// How an iod serves reads (`tessera iod --serve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServeMode {
    /// Through the page cache, copied into a request buffer, then sent or pushed.
    Normal,
    /// As `Normal`, but reads are served straight from a mapping of the object's page-cache
    /// pages: one-sided reads from same-host clients are pushed from it
    /// (`ObjectStore::read_mapped`), and a read of at most 1 MiB all in the page cache is sent
    /// from it into the socket (`ObjectStore::read_mapped_now`).
    #[default]
    Mmap,
    /// Through the iod's own cache: hits are sent and pushed straight from its buffers.
    Unified,
}

impl ServeMode {
    /// Every mode, in the order the bench compares them.
    pub const ALL: [Self; 3] = [Self::Normal, Self::Mmap, Self::Unified];

    /// The mode's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Mmap => "mmap",
            Self::Unified => "unified",
        }
    }
}

impl std::fmt::Display for ServeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ServeMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|mode| mode.name() == text)
            .ok_or_else(|| format!("serve mode {text:?} is not one of normal, mmap, unified"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_parses_from_its_name_and_nothing_else_does() {
        for mode in ServeMode::ALL {
            assert_eq!(mode.name().parse::<ServeMode>(), Ok(mode));
            assert_eq!(mode.to_string(), mode.name());
        }
        assert!("fast".parse::<ServeMode>().unwrap_err().contains("fast"));
    }
}
