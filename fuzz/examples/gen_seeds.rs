//! Writes the seed inputs of the fuzz targets: `seeds/frame/*` and `seeds/bodies/*`.
//!
//! Run from anywhere with `cargo run --manifest-path fuzz/Cargo.toml --example gen-seeds`;
//! the files are rewritten in place (names are stable, so a rerun changes nothing unless the
//! encodings changed).

use std::fs;
use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    for (target, seeds) in [("frame", tessera_fuzz::frame_seeds()), ("bodies", tessera_fuzz::body_seeds())] {
        let dir = root.join(target);
        fs::create_dir_all(&dir)?;
        for (name, bytes) in &seeds {
            fs::write(dir.join(format!("{name}.bin")), bytes)?;
        }
        println!("{}: {} seeds", dir.display(), seeds.len());
    }
    Ok(())
}
