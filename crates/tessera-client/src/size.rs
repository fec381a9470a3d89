//! Sizes as people type them (`64k`, `512m`, `2g`): shared by the layout syntax
//! (`layouts.rs`, which re-exports [`parse_bytes`]), the client options and the cluster file,
//! so none of those imports another for it.

/// A size with an optional suffix: `k`, `m`, `g` (binary, as `dd` and `lfs` read them),
/// also written `KiB`/`MiB`/`GiB` (as Tessera prints sizes) or `K`/`KB`, in any case, with or
/// without a space (`64k`, `1MiB`, `2 GiB`).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, suffix) = (&lower[..digits_end], lower[digits_end..].trim());
    let scale = match suffix {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => 0,
    };
    digits
        .parse::<u64>()
        .ok()
        .filter(|_| scale != 0)
        .and_then(|value| value.checked_mul(scale))
        .ok_or_else(|| {
            format!("{text:?} is not a size (digits with an optional k, m or g, or KiB, MiB, GiB)")
        })
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_read_as_typed_and_as_printed() {
        for (text, bytes) in [
            ("4096", 4096),
            ("64k", 64 << 10),
            ("64K", 64 << 10),
            ("64KB", 64 << 10),
            ("1m", 1 << 20),
            ("1MiB", 1 << 20),
            ("2 GiB", 2 << 30),
            (" 8 ", 8),
            ("0", 0),
        ] {
            assert_eq!(parse_bytes(text), Ok(bytes), "{text:?}");
        }
        for text in [
            "",
            "k",
            "1.5m",
            "12q",
            "-1",
            "1 MiBs",
            "99999999999999999999g",
        ] {
            assert!(parse_bytes(text).is_err(), "{text:?}");
        }
    }
}
