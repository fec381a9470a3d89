//! Build script: with the `link` feature, finds libfabric through pkg-config, compiles the C
//! shim (`shim/shim.c`) and runs bindgen over `shim/shim.h`, keeping only the libfabric items
//! the safe wrapper uses. Without the feature it does nothing, so a workspace build needs no
//! libfabric.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "link")]
    link::run();
}

#[cfg(feature = "link")]
mod link {
    use std::path::{Path, PathBuf};

    use bindgen::callbacks::{IntKind, ParseCallbacks};

    /// Gives libfabric's macros Rust types that match how they are used: the error numbers of
    /// `fi_errno.h` are `i32` (calls return them negated), every other `FI_*` macro is a flag
    /// or mode bit of a `uint64_t` field, so `u64` (bindgen would pick `u32` for small ones).
    #[derive(Debug)]
    struct MacroTypes {
        errno_names: Vec<String>,
    }

    impl ParseCallbacks for MacroTypes {
        fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
            if self.errno_names.iter().any(|errno| errno == name) {
                Some(IntKind::I32)
            } else if name.starts_with("FI_") {
                Some(IntKind::U64)
            } else {
                None
            }
        }
    }

    /// The names `#define`d in `rdma/fi_errno.h`.
    fn errno_names(include_paths: &[PathBuf]) -> Vec<String> {
        let mut candidates: Vec<PathBuf> = include_paths.to_vec();
        candidates.push(PathBuf::from("/usr/include"));
        let text = candidates
            .iter()
            .map(|dir| Path::new(dir).join("rdma/fi_errno.h"))
            .find_map(|path| std::fs::read_to_string(path).ok())
            .expect("rdma/fi_errno.h not found next to libfabric's other headers");
        text.lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("#define"))
                    .then(|| words.next())
                    .flatten()
            })
            .filter(|name| name.starts_with("FI_E"))
            .map(str::to_owned)
            .collect()
    }

    pub fn run() {
        println!("cargo:rerun-if-changed=shim/shim.h");
        println!("cargo:rerun-if-changed=shim/shim.c");
        let library = pkg_config::Config::new()
            .atleast_version("1.9")
            .probe("libfabric")
            .expect("libfabric not found by pkg-config (Debian: apt-get install libfabric-dev)");

        let mut shim = cc::Build::new();
        shim.file("shim/shim.c").warnings(true);
        for include in &library.include_paths {
            shim.include(include);
        }
        shim.compile("tessera_ofi_shim");

        let mut builder = bindgen::Builder::default()
            .header("shim/shim.h")
            .allowlist_function("tessera_fi_.*")
            .allowlist_function("fi_getinfo")
            .allowlist_function("fi_freeinfo")
            .allowlist_function("fi_dupinfo")
            .allowlist_function("fi_fabric")
            .allowlist_function("fi_strerror")
            .allowlist_type("fi_info")
            .allowlist_type("fi_msg_rma")
            .allowlist_type("fi_rma_iov")
            .allowlist_type("fi_cq_entry")
            .allowlist_type("fi_cq_err_entry")
            .allowlist_type("fi_cq_attr")
            .allowlist_type("fi_av_attr")
            .allowlist_type("fi_context2")
            .allowlist_var("FI_.*")
            .allowlist_var("FI_ADDR_.*")
            .blocklist_type("iovec")
            .raw_line("pub use libc::iovec;")
            .derive_default(true)
            .layout_tests(false)
            .generate_comments(false)
            .prepend_enum_name(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
            .parse_callbacks(Box::new(MacroTypes {
                errno_names: errno_names(&library.include_paths),
            }));
        for include in &library.include_paths {
            builder = builder.clang_arg(format!("-I{}", include.display()));
        }
        let bindings = builder
            .generate()
            .expect("bindgen failed on shim/shim.h (is libclang-dev installed?)");
        let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        bindings
            .write_to_file(out.join("bindings.rs"))
            .expect("writing bindings.rs into OUT_DIR");
    }
}
