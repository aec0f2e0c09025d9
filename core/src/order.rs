//! Sorting by position: the one place this crate calls the standard library's sort.
//!
//! Each `sort_unstable_by` on a new element type or comparator compiles a copy of the
//! whole sort (about 3.5 KB of wasm). Sorting the positions `0..len` with the comparator
//! behind `dyn` compiles it once; callers then take their items in the order returned.

use alloc::vec::Vec;
use core::cmp::Ordering;

/// The positions `0..len`, ordered by `compare`. `compare` must be a total order on the
/// positions it is given (break ties, by position for instance): the order returned is
/// then the only one, whatever the sort does with equal elements.
pub(crate) fn sorted_positions(
    len: usize,
    compare: &mut dyn FnMut(usize, usize) -> Ordering,
) -> Vec<usize> {
    let mut positions: Vec<usize> = (0..len).collect();
    positions.sort_unstable_by(|&a, &b| compare(a, b));
    positions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_positions_by_the_comparator() {
        let items = [30, 10, 20, 10];
        let order = sorted_positions(items.len(), &mut |a, b| {
            items[a].cmp(&items[b]).then(a.cmp(&b))
        });
        assert_eq!(order, [1, 3, 2, 0]);
        assert_eq!(sorted_positions(0, &mut |_, _| Ordering::Equal), []);
    }
}
