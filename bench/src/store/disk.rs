//! The disk under the store, timed without it.
//!
//! A durable 4 KiB write, and a sync after pages written side by side or scattered.

use std::fs;
use std::path::Path;
use std::time::Instant;

use crate::measure::{BenchError, Row, Timing};

/// What the disk under `dir` takes for one durable write: 4 KiB written in place,
/// then `fdatasync`. Every commit with the default durability pays at least this.
pub(super) fn fsync_probe(dir: &Path, count: u32) -> Result<Row, BenchError> {
    use std::io::{Seek, SeekFrom, Write as _};
    let path = dir.join("fsync-probe");
    let mut file = fs::File::create(&path)?;
    let page = [0x5au8; 4096];
    let mut calls = Vec::with_capacity(count as usize);
    let start = Instant::now();
    for n in 0..count {
        let one = Instant::now();
        file.seek(SeekFrom::Start(u64::from(n % 16) * 4096))?;
        file.write_all(&page)?;
        file.sync_data()?;
        calls.push(one.elapsed());
    }
    let timing = Timing {
        total: start.elapsed(),
        calls,
    };
    drop(file);
    fs::remove_file(&path)?;
    Ok(Row::new(
        "fsync",
        "fsync of this disk (4 KiB write + fdatasync)",
        1,
        &timing,
    ))
}

/// What one `fdatasync` costs after `pages` 4 KiB pages were written in place, once
/// side by side and once scattered over a 16 MiB file (allocated and synced before).
/// A redb commit writes its pages where the B-trees' free pages are, a WAL appends: on
/// disks where a sync's cost grows with the number of separate extents, the same bytes
/// cost more scattered.
pub(super) fn fsync_pages(dir: &Path, pages: u64, count: u32) -> Result<Vec<Row>, BenchError> {
    use std::os::unix::fs::FileExt as _;
    const FILE_PAGES: u64 = 4096;
    let path = dir.join("fsync-pages");
    let file = fs::File::create(&path)?;
    let chunk = vec![0xa5u8; 1 << 20];
    for n in 0..FILE_PAGES * 4096 / chunk.len() as u64 {
        file.write_all_at(&chunk, n * chunk.len() as u64)?;
    }
    file.sync_all()?;
    let page = [0x5au8; 4096];
    let run = vec![0x5au8; 4096 * usize::try_from(pages).unwrap_or(1)];
    // A fixed sequence (xorshift), so that every run scatters alike.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next_page = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % FILE_PAGES
    };
    let mut rows = Vec::new();
    for scattered in [false, true] {
        let mut calls = Vec::with_capacity(count as usize);
        let start = Instant::now();
        for n in 0..u64::from(count) {
            let one = Instant::now();
            if scattered {
                for _ in 0..pages {
                    file.write_all_at(&page, next_page() * 4096)?;
                }
            } else {
                file.write_all_at(&run, (n * pages % (FILE_PAGES - pages)) * 4096)?;
            }
            file.sync_data()?;
            calls.push(one.elapsed());
        }
        let timing = Timing {
            total: start.elapsed(),
            calls,
        };
        rows.push(if scattered {
            Row::new(
                "fsync-scattered",
                &format!("fdatasync after {pages} scattered 4 KiB pages"),
                1,
                &timing,
            )
        } else {
            Row::new(
                "fsync-contiguous",
                &format!("fdatasync after {pages} contiguous 4 KiB pages"),
                1,
                &timing,
            )
        });
    }
    drop(file);
    fs::remove_file(&path)?;
    Ok(rows)
}
