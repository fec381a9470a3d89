//! The calling process's umask, for the edges that create files for a user (the CLI, Python;
//! the FUSE mount gets it from the kernel with each request): what `open(2)` and `mkdir(2)`
//! would do with the mode, Tessera's edges do before they ask the mds, which stores the bits
//! it is given.
//!
//! The umask is read from `/proc/self/status` (Linux 4.7 and later), which leaves it as it
//! is; only where that line is missing is it read by setting and restoring it, which a
//! thread creating a file at that very moment could see.

/// Mode of a new file before the umask, as `open(2)` callers such as `touch` and `cp` ask.
pub const NEW_FILE_MODE: u32 = 0o666;
/// Mode of a new directory before the umask, as `mkdir(1)` asks.
pub const NEW_DIRECTORY_MODE: u32 = 0o777;

/// This process's umask (permission bits only).
pub fn process_umask() -> u32 {
    if let Some(mask) = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| parse_status(&status))
    {
        return mask;
    }
    // SAFETY: umask only swaps the process's mask and cannot fail; the old one is put back
    // at once.
    let mask = unsafe {
        let mask = libc::umask(0o022);
        libc::umask(mask);
        mask
    };
    mask & 0o777
}

/// The `Umask:` line of a `/proc/PID/status` text.
fn parse_status(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Umask:"))
        .and_then(|value| u32::from_str_radix(value.trim(), 8).ok())
        .map(|mask| mask & 0o777)
}

/// `mode` less this process's umask, as the kernel makes a local file's or directory's.
pub fn apply(mode: u32) -> u32 {
    mode & !process_umask()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_is_read_in_octal() {
        assert_eq!(
            parse_status("Name:\tx\nUmask:\t0027\nState:\tR\n"),
            Some(0o027)
        );
        assert_eq!(parse_status("Umask:\t0777\n"), Some(0o777));
        assert_eq!(parse_status("Name:\tx\n"), None);
        assert_eq!(parse_status("Umask:\tzz\n"), None);
        // The live value matches what umask(2) reports.
        // SAFETY: as in process_umask: swapped and put back at once.
        let live = unsafe {
            let mask = libc::umask(0o022);
            libc::umask(mask);
            mask
        };
        assert_eq!(process_umask(), live);
    }
}
