//! Sizes as people type them (`64k`, `512m`, `2g`): shared by the layout syntax
//! (`layouts.rs`, which re-exports [`parse_bytes`]), the client options and the cluster file,
//! so none of those imports another for it.

/// A size with an optional k/m/g suffix.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, scale) = match text.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&text[..text.len() - 1], 1u64 << 10),
        Some('m') => (&text[..text.len() - 1], 1 << 20),
        Some('g') => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|value| value.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not a size (digits with an optional k, m or g)"))
}
