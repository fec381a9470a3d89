//! The iod's public API as the `tessera` binary builds it, without the `bench` feature, has
//! no way to turn capability checks off (issue 35, item 8): `Iod::checks_switch` exists
//! only for `tessera-bench`'s in-process iods, which turn the feature on. Method resolution
//! tells which build this is: an inherent `checks_switch` wins over the fallback trait's
//! below, so the type of what the call returns says whether `Iod` has one of its own.
//!
//! `make test` runs this test without `bench` (`cargo test --workspace` without
//! tessera-bench, whose feature would otherwise be unified in), and `cargo test -p
//! tessera-bench` builds the iod with it.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tessera_iod::{cost::CostModel, Iod, ObjectStore};

/// What `checks_switch()` returns when `Iod` has none of its own (unused in a bench
/// build, where the inherent method is found).
#[cfg_attr(feature = "bench", allow(dead_code))]
struct NoSwitch;

/// The method every type has when it has no inherent one of that name.
#[cfg_attr(feature = "bench", allow(dead_code))]
trait Fallback {
    fn checks_switch(&self) -> NoSwitch {
        NoSwitch
    }
}

impl<T> Fallback for T {}

#[test]
fn the_checks_switch_exists_only_in_bench_builds() {
    let data = tempfile::tempdir().unwrap();
    let store = ObjectStore::open_with(data.path(), CostModel::default()).unwrap();
    let iod = Iod::new(0, store);
    let found = std::any::type_name_of_val(&iod.checks_switch());
    if cfg!(feature = "bench") {
        assert_eq!(found, std::any::type_name::<Arc<AtomicBool>>());
    } else {
        assert_eq!(
            found,
            std::any::type_name::<NoSwitch>(),
            "the iod of a server build offers a switch that turns capability checks off"
        );
    }
}
