//! The library's version, for C programs that check what they were linked with: a string
//! from [`tessera_version`] and the three numbers as preprocessor constants in `tessera.h`.
//!
//! The numbers are written out (cbindgen copies literals, not `env!`), and a compile-time check
//! holds them to the crate's version in `Cargo.toml`, so a version bump that forgets them does
//! not build.

use std::ffi::c_char;

/// Major version of the library this header belongs to.
pub const TESSERA_VERSION_MAJOR: u32 = 0;
/// Minor version of the library this header belongs to.
pub const TESSERA_VERSION_MINOR: u32 = 1;
/// Patch version of the library this header belongs to.
pub const TESSERA_VERSION_PATCH: u32 = 0;

/// The crate's version as `MAJOR.MINOR.PATCH`, NUL-terminated.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// A decimal number at compile time (the parts of `CARGO_PKG_VERSION`).
const fn decimal(text: &str) -> u32 {
    let bytes = text.as_bytes();
    assert!(!bytes.is_empty(), "a version part is empty");
    let mut value: u32 = 0;
    let mut index = 0;
    while index < bytes.len() {
        assert!(
            bytes[index].is_ascii_digit(),
            "a version part is not a number"
        );
        value = value * 10 + (bytes[index] - b'0') as u32;
        index += 1;
    }
    value
}

const _: () = {
    assert!(TESSERA_VERSION_MAJOR == decimal(env!("CARGO_PKG_VERSION_MAJOR")));
    assert!(TESSERA_VERSION_MINOR == decimal(env!("CARGO_PKG_VERSION_MINOR")));
    assert!(TESSERA_VERSION_PATCH == decimal(env!("CARGO_PKG_VERSION_PATCH")));
};

/// The library's version as a NUL-terminated string, `"MAJOR.MINOR.PATCH"` (for example
/// `"0.1.0"`), the same numbers as `TESSERA_VERSION_MAJOR`, `_MINOR` and `_PATCH` when the
/// header and the library match. The string is static: never free it. Needs no client and
/// never fails.
#[no_mangle]
pub extern "C" fn tessera_version() -> *const c_char {
    VERSION.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_string_is_the_three_numbers() {
        // SAFETY: tessera_version returns a static NUL-terminated string.
        let version = unsafe { std::ffi::CStr::from_ptr(tessera_version()) };
        assert_eq!(
            version.to_str().unwrap(),
            format!("{TESSERA_VERSION_MAJOR}.{TESSERA_VERSION_MINOR}.{TESSERA_VERSION_PATCH}")
        );
    }
}
