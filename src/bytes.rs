//! Byte helpers for the hot paths: short keys (topic texts, words) compared and hashed in line,
//! where the C library's `memcmp` and `memcpy` would be a call each for a few bytes.

/// `a == b`, compared eight bytes at a time in line. A call to `memcmp` for each compare took
/// 6-7 % of a warm `LazyDfa` lookup's profile and of a cached hit's. The bytes past the whole
/// words are compared as one more word that overlaps the last, a key of four to seven bytes as
/// two overlapping halves, and a shorter one by its first, middle and last bytes, where a byte
/// loop cost four instructions a byte (topic words are often three to seven bytes, and a hot
/// lookup compares one a level).
#[inline]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => half_at(a, 0) == half_at(b, 0) && half_at(a, n - 4) == half_at(b, n - 4),
        _ => {
            let (mut ca, mut cb) = (a.chunks_exact(8), b.chunks_exact(8));
            for (x, y) in (&mut ca).zip(&mut cb) {
                if word_at(x) != word_at(y) {
                    return false;
                }
            }
            ca.remainder().is_empty() || word_at(&a[n - 8..]) == word_at(&b[n - 8..])
        }
    }
}

/// The four bytes of `key` from `at`, as one little-endian value.
#[inline]
fn half_at(key: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(key[at..at + 4].try_into().expect("four bytes"))
}

/// The eight bytes of `chunk` as one little-endian word.
#[inline]
pub(crate) fn word_at(chunk: &[u8]) -> u64 {
    u64::from_le_bytes(chunk.try_into().expect("eight bytes"))
}

/// A byte of value 1 in each of a word's eight bytes: times `b`, the word of eight `b`s.
const ONES: u64 = 0x0101_0101_0101_0101;
/// The high bit of each byte.
const HIGHS: u64 = 0x8080_8080_8080_8080;
/// The low seven bits of each byte.
const LOWS: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// The high bit of each byte of `x` that equals `b`, and no other bit. Exact: the sum that
/// finds the zero bytes of `x ^ bbbbbbbb` adds seven bits to seven bits, so no carry crosses
/// into the next byte (the shorter test with a subtraction borrows across bytes and may mark
/// a byte just above a match).
#[inline]
pub(crate) fn bytes_equal(x: u64, b: u8) -> u64 {
    let y = x ^ (ONES * u64::from(b));
    !(((y & LOWS) + LOWS) | y | LOWS)
}

/// Whether some byte of `x` is below `n`, for `n <= 128`; never for `n = 0`. Exact as to
/// whether, not as to which byte.
#[inline]
pub(crate) fn any_below(x: u64, n: u8) -> bool {
    debug_assert!(n <= 128);
    x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS != 0
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn same_agrees_with_eq() {
        let keys: [&[u8]; 8] = [
            b"",
            b"a",
            b"abcdefg",
            b"abcdefgh",
            b"abcdefgi",
            b"abcdefghijklmnopq",
            b"abcdefghijklmnopr",
            b"bbcdefghijklmnopq",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(same(a, b), a == b, "{a:?} {b:?}");
            }
        }
        // Every length to 20, against a copy with any one byte changed: each byte is compared
        // by some load, whichever path the length takes.
        let text: Vec<u8> = (b'a'..=b'z').collect();
        for n in 0..=20 {
            let a = &text[..n];
            let copy = a.to_vec();
            assert!(same(a, &copy));
            for i in 0..n {
                let mut b = a.to_vec();
                b[i] ^= 0x20;
                assert!(!same(a, &b), "{n} {i}");
            }
        }
    }

    #[test]
    fn byte_masks_agree_with_the_bytes() {
        // Every byte value at every position, beside neighbours that would catch a carry or a
        // borrow between bytes (a match, its successor, 0x80, 0xff).
        for pos in 0..8 {
            for v in 0..=255u8 {
                for fill in [0u8, 1, 0x2e, 0x2f, 0x7f, 0x80, 0xff] {
                    let mut bytes = [fill; 8];
                    bytes[pos] = v;
                    let x = u64::from_le_bytes(bytes);
                    for b in [0u8, 1, b'.', b'/', b'+', b'#', 0x7f, 0x80, 0xff] {
                        let want = bytes
                            .iter()
                            .enumerate()
                            .filter(|(_, &c)| c == b)
                            .fold(0, |m, (i, _)| m | 0x80 << (8 * i));
                        assert_eq!(bytes_equal(x, b), want, "{bytes:?} {b}");
                    }
                    for n in [0u8, 1, 9, 33, 64, 128] {
                        assert_eq!(
                            any_below(x, n),
                            bytes.iter().any(|&c| c < n),
                            "{bytes:?} {n}"
                        );
                    }
                }
            }
        }
    }
}
