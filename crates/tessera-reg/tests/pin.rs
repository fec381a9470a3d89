//! The pin registrar and the registry on real memory: which pages the kernel reports locked.
//!
//! `mlock` marks whole mappings locked (`lo` in the VmFlags of `/proc/self/smaps`), splitting
//! a mapping at page granularity where a lock starts or ends, so the flag of the mapping that
//! holds a page says whether that page is locked; `Locked:` counts the locked resident bytes
//! of a mapping. Both are read here after every step.

use std::sync::Arc;

use tessera_reg::mapping::AnonymousMapping;
use tessera_reg::{
    page_bytes, Caching, Grouping, PinRegistrar, Policy, RegError, Registrar, Registry, Segment,
};

/// One mapping of `/proc/self/smaps`.
#[derive(Debug)]
struct Vma {
    start: usize,
    end: usize,
    locked_flag: bool,
    locked_kib: usize,
}

fn smaps() -> Vec<Vma> {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut vmas: Vec<Vma> = Vec::new();
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((start, end)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) {
                vmas.push(Vma {
                    start,
                    end,
                    locked_flag: false,
                    locked_kib: 0,
                });
                continue;
            }
        }
        let Some(vma) = vmas.last_mut() else { continue };
        if let Some(rest) = line.strip_prefix("Locked:") {
            vma.locked_kib = rest.trim().trim_end_matches("kB").trim().parse().unwrap();
        } else if let Some(rest) = line.strip_prefix("VmFlags:") {
            vma.locked_flag = rest.split_whitespace().any(|flag| flag == "lo");
        }
    }
    vmas
}

/// For each page of `region`: whether the mapping holding it is locked (false if unmapped).
fn locked_pages(region: Segment) -> Vec<bool> {
    let vmas = smaps();
    let page = page_bytes();
    (0..region.length / page)
        .map(|index| {
            let address = region.address + index * page;
            vmas.iter()
                .find(|vma| vma.start <= address && address < vma.end)
                .is_some_and(|vma| vma.locked_flag)
        })
        .collect()
}

/// `Locked:` bytes of the mappings lying inside `region`.
fn locked_bytes_inside(region: Segment) -> usize {
    smaps()
        .iter()
        .filter(|vma| vma.start >= region.address && vma.end <= region.end())
        .map(|vma| vma.locked_kib * 1024)
        .sum()
}

fn page_set(count: usize, locked: impl IntoIterator<Item = usize>) -> Vec<bool> {
    let mut pages = vec![false; count];
    for page in locked {
        pages[page] = true;
    }
    pages
}

fn pages_segment(mapping: &AnonymousMapping, first: usize, pages: usize) -> Segment {
    Segment::new(
        mapping.address() + first * page_bytes(),
        pages * page_bytes(),
    )
}

#[test]
fn register_locks_exactly_the_touched_pages_and_deregister_unlocks_them() {
    let page = page_bytes();
    let mapping = AnonymousMapping::new(16).unwrap();
    let registrar = PinRegistrar::new();
    // From the middle of page 2 to the middle of page 5.
    let segment = Segment::new(mapping.address() + 2 * page + 100, 3 * page);
    let handle = registrar.register(segment).unwrap();
    assert_eq!(handle.segment, segment);
    assert_eq!(locked_pages(mapping.segment()), page_set(16, 2..=5));
    assert_eq!(locked_bytes_inside(mapping.segment()), 4 * page);
    registrar.deregister(handle.clone()).unwrap();
    assert_eq!(locked_pages(mapping.segment()), vec![false; 16]);
    assert_eq!(registrar.live(), 0);
    // Twice is refused.
    assert!(matches!(
        registrar.deregister(handle),
        Err(RegError::Registrar { .. })
    ));
}

#[test]
fn overlapping_registrations_nest() {
    let mapping = AnonymousMapping::new(12).unwrap();
    let registrar = PinRegistrar::new();
    let low = registrar.register(pages_segment(&mapping, 1, 4)).unwrap(); // 1..=4
    let high = registrar.register(pages_segment(&mapping, 4, 4)).unwrap(); // 4..=7
    let inner = registrar.register(pages_segment(&mapping, 2, 1)).unwrap(); // 2
    registrar.deregister(low).unwrap();
    // Page 4 is still high's, page 2 still inner's.
    assert_eq!(
        locked_pages(mapping.segment()),
        page_set(12, [2, 4, 5, 6, 7])
    );
    registrar.deregister_batch(vec![high, inner]).unwrap();
    assert_eq!(locked_pages(mapping.segment()), vec![false; 12]);
}

#[test]
fn failed_mlock_over_a_hole_is_undone_and_names_the_hole() {
    let page = page_bytes();
    let mut mapping = AnonymousMapping::new(16).unwrap();
    let hole = mapping.punch_hole(8, 2).unwrap();
    let whole = mapping.segment();

    // What the kernel does on its own: the part before the hole stays locked.
    // SAFETY: mlock/munlock only change lock flags of our own mapping.
    let status = unsafe { libc::mlock(whole.address as *const libc::c_void, whole.length) };
    assert_eq!(status, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOMEM)
    );
    let raw = locked_pages(whole);
    assert!(
        raw[..8].iter().all(|&locked| locked),
        "kernel behaviour changed: {raw:?}"
    );
    // SAFETY: as above.
    unsafe { libc::munlock(whole.address as *const libc::c_void, 8 * page) };
    assert_eq!(locked_pages(whole), vec![false; 16]);

    // Through the registrar: the same failure, undone.
    let registrar = PinRegistrar::new();
    let other = registrar.register(pages_segment(&mapping, 2, 1)).unwrap();
    let err = registrar.register(whole).unwrap_err();
    match &err {
        RegError::Unmapped {
            segment,
            hole: found,
            ..
        } => {
            assert_eq!(*segment, whole);
            assert_eq!(*found, Segment::new(hole.address, page));
        }
        other => panic!("expected Unmapped, got {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&format!("{:#x}", hole.address)),
        "{message}"
    );
    // Only the page another registration holds stays locked.
    assert_eq!(locked_pages(whole), page_set(16, [2]));
    registrar.deregister(other).unwrap();
    assert_eq!(locked_pages(whole), vec![false; 16]);
    assert_eq!(locked_bytes_inside(whole), 0);
}

#[test]
fn ogr_registers_a_2048x2048_int_subarray_once() {
    // The whole array, as an application holds it; process 0 of a 2 x 2 block-block
    // distribution owns rows 0..1024, columns 0..1024: 1024 rows of 4 KiB, 8 KiB apart.
    let array = vec![7i32; 2048 * 2048];
    let base = array.as_ptr() as usize;
    let rows: Vec<Segment> = (0..1024)
        .map(|row| Segment::new(base + row * 2048 * 4, 1024 * 4))
        .collect();
    let registry = Registry::new(
        Arc::new(PinRegistrar::new()),
        Policy::new(Grouping::Ogr, Caching::None),
    )
    .unwrap();
    let hull = Segment::new(base, 1023 * 8192 + 4096).page_aligned(page_bytes());
    {
        let guard = registry.acquire(&rows).unwrap();
        assert_eq!(guard.registrations(), 1);
        assert!(guard.covers().iter().all(|cover| cover.key == guard.key(0)));
        assert!(locked_pages(hull).iter().all(|&locked| locked));
        let stats = registry.stats();
        assert_eq!((stats.registrations, stats.failed_optimistic), (1, 0));
    }
    assert!(locked_pages(hull).iter().all(|&locked| !locked));
    assert_eq!(registry.stats().deregistrations, 1);
    assert_eq!(array[2048 * 2047], 7);
}

#[test]
fn ogr_with_unmapped_holes_registers_the_mapped_runs() {
    let page = page_bytes();
    // 1024 one-page buffers on the even pages of 2048 pages; 10 of the odd gap pages are
    // unmapped holes.
    let mut mapping = AnonymousMapping::new(2048).unwrap();
    let holes: Vec<usize> = (1..=10).map(|k| k * 180 + 1).collect();
    for &hole in &holes {
        mapping.punch_hole(hole, 1).unwrap();
    }
    let segments: Vec<Segment> = (0..1024)
        .map(|index| Segment::new(mapping.address() + 2 * index * page, page))
        .collect();
    let registry = Registry::new(
        Arc::new(PinRegistrar::new()),
        Policy::new(Grouping::Ogr, Caching::None),
    )
    .unwrap();
    let guard = registry.acquire(&segments).unwrap();
    let stats = registry.stats();
    assert_eq!(stats.registrations, 11, "one per mapped run");
    assert_eq!((stats.failed_optimistic, stats.hole_queries), (1, 1));
    assert_eq!(guard.registrations(), 11);
    for (cover, segment) in guard.covers().iter().zip(&segments) {
        assert!(cover.region.covers(segment));
        assert!(!holes
            .iter()
            .any(|&hole| cover.region.overlaps(&pages_segment(&mapping, hole, 1))));
    }
    // Every page is locked but the holes, and the last page (a gap after the last buffer).
    let locked = locked_pages(mapping.segment());
    for (index, &is_locked) in locked.iter().enumerate() {
        let expected = !holes.contains(&index) && index != 2047;
        assert_eq!(is_locked, expected, "page {index}");
    }
    assert_eq!(
        locked_bytes_inside(mapping.segment()),
        (2048 - holes.len() - 1) * page
    );
    drop(guard);
    assert!(locked_pages(mapping.segment()).iter().all(|&l| !l));
    assert_eq!(registry.stats().deregistrations, 11);
    // A buffer that is itself in a hole is an error naming it, and leaves nothing locked.
    let mut with_bad = segments.clone();
    with_bad.push(pages_segment(&mapping, holes[3], 1));
    let err = registry.acquire(&with_bad).unwrap_err();
    assert!(matches!(err, RegError::Unmapped { .. }), "{err}");
    assert!(locked_pages(mapping.segment()).iter().all(|&l| !l));
    let stats = registry.stats();
    assert_eq!(stats.registrations, stats.deregistrations);
}

#[test]
fn invalidated_pin_registrations_are_unlocked_and_never_returned() {
    let mut mapping = AnonymousMapping::new(8).unwrap();
    let registry = Registry::new(
        Arc::new(PinRegistrar::new()),
        Policy::new(Grouping::Ogr, Caching::PinDown),
    )
    .unwrap();
    let buffer = pages_segment(&mapping, 2, 2);
    let key = registry.acquire(&[buffer]).unwrap().key(0);
    assert_eq!(registry.acquire(&[buffer]).unwrap().key(0), key, "cached");
    assert_eq!(locked_pages(mapping.segment()), page_set(8, [2, 3]));
    // The application frees the buffer: it invalidates, then unmaps.
    assert_eq!(registry.invalidate(buffer).unwrap(), 1);
    assert_eq!(locked_pages(mapping.segment()), vec![false; 8]);
    mapping.punch_hole(2, 2).unwrap();
    let err = registry.acquire(&[buffer]).unwrap_err();
    assert!(matches!(err, RegError::Unmapped { .. }), "{err}");
    let stats = registry.stats();
    assert_eq!(stats.cache_hits, 1);
    assert_eq!((stats.registrations, stats.deregistrations), (1, 1));
}

#[test]
fn fmrd_on_pin_leaves_nothing_locked_after_flush() {
    let mapping = AnonymousMapping::new(256).unwrap();
    let registrar = Arc::new(PinRegistrar::new());
    let registry = Registry::new(
        registrar.clone(),
        Policy::new(Grouping::Individual, Caching::Fmrd).with_entries_max(10),
    )
    .unwrap();
    for round in 0..500 {
        let first = (round * 37) % 250;
        drop(
            registry
                .acquire(&[pages_segment(&mapping, first, 3)])
                .unwrap(),
        );
    }
    let stats = registry.stats();
    assert!(stats.deregistration_batches > 0);
    assert_eq!(stats.cached_entries, 10);
    registry.clear().unwrap();
    assert_eq!(registrar.live(), 0);
    assert!(locked_pages(mapping.segment()).iter().all(|&l| !l));
    let stats = registry.stats();
    assert_eq!(stats.registrations, stats.deregistrations);
}
