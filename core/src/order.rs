//! Sorting by position: the one sort of this crate.
//!
//! Callers sort the positions `0..len` with their comparator behind `dyn`, then take
//! their items in the order returned, so the sort compiles once. On wasm32 it is a
//! heapsort of a few hundred bytes: the standard library's `sort_unstable_by` is about
//! 3.5 KB of wasm, and the npm package has a size budget. Elsewhere it is the standard
//! sort, two to three times as fast on large inputs (the members of a large JSON object).
//! Both give the same order, since the comparator must be a total order.

use alloc::vec::Vec;
use core::cmp::Ordering;

/// The positions `0..len`, ordered by `compare`. `compare` must be a total order on the
/// positions it is given (break ties, by position for instance): the order returned is
/// then the only one, whatever the sort does with equal elements.
pub(crate) fn sorted_positions(
    len: usize,
    compare: &mut dyn FnMut(usize, usize) -> Ordering,
) -> Vec<usize> {
    #[cfg(target_arch = "wasm32")]
    {
        heapsort(len, compare)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let mut positions: Vec<usize> = (0..len).collect();
        positions.sort_unstable_by(|&a, &b| compare(a, b));
        positions
    }
}

/// The positions `0..len` by heapsort: O(n log n) comparisons at worst, no memory besides
/// the positions.
#[cfg(any(target_arch = "wasm32", test))]
fn heapsort(len: usize, compare: &mut dyn FnMut(usize, usize) -> Ordering) -> Vec<usize> {
    let mut positions: Vec<usize> = (0..len).collect();
    // Build a max-heap, then move its top behind the heap one by one.
    for start in (0..len / 2).rev() {
        sift_down(&mut positions, start, len, compare);
    }
    for end in (1..len).rev() {
        positions.swap(0, end);
        sift_down(&mut positions, 0, end, compare);
    }
    positions
}

/// Moves `heap[root]` down until it is greater than its children, within `heap[..end]`.
#[cfg(any(target_arch = "wasm32", test))]
fn sift_down(
    heap: &mut [usize],
    mut root: usize,
    end: usize,
    compare: &mut dyn FnMut(usize, usize) -> Ordering,
) {
    loop {
        let mut child = 2 * root + 1;
        if child >= end {
            return;
        }
        if child + 1 < end && compare(heap[child], heap[child + 1]) == Ordering::Less {
            child += 1;
        }
        if compare(heap[root], heap[child]) != Ordering::Less {
            return;
        }
        heap.swap(root, child);
        root = child;
    }
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
        assert_eq!(heapsort(0, &mut |_, _| Ordering::Equal), []);
        assert_eq!(heapsort(1, &mut |_, _| Ordering::Equal), [0]);
    }

    #[test]
    fn the_heapsort_agrees_with_the_standard_sort() {
        // Every length up to 40 with many equal keys (ties broken by position), and
        // pseudo-random keys at larger lengths.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for len in (0..40).chain([100, 1000, 4097]) {
            let keys: Vec<u64> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state % if len < 40 { 4 } else { 1 << 20 }
                })
                .collect();
            let compare = &mut |a: usize, b: usize| keys[a].cmp(&keys[b]).then(a.cmp(&b));
            let mut expected: Vec<usize> = (0..len).collect();
            expected.sort_by_key(|&i| (keys[i], i));
            assert_eq!(heapsort(len, compare), expected, "heapsort, length {len}");
            assert_eq!(sorted_positions(len, compare), expected, "length {len}");
        }
    }
}
