//! Byte helpers for the hot paths: short keys (topic texts, words) compared and hashed in line,
//! where the C library's `memcmp` and `memcpy` would be a call each for a few bytes.

/// `a == b`, compared eight bytes at a time in line. A call to `memcmp` for each compare took
/// 6-7 % of a warm `LazyDfa` lookup's profile and of a cached hit's.
#[inline]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut ca, mut cb) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut ca).zip(&mut cb) {
        if word_at(x) != word_at(y) {
            return false;
        }
    }
    ca.remainder()
        .iter()
        .zip(cb.remainder())
        .all(|(x, y)| x == y)
}

/// The eight bytes of `chunk` as one little-endian word.
#[inline]
pub(crate) fn word_at(chunk: &[u8]) -> u64 {
    u64::from_le_bytes(chunk.try_into().expect("eight bytes"))
}

/// The last bytes of a key past its whole words (`tail`, at most seven), as one word: the last
/// eight bytes of `key` when it has them (overlapping the word before), else the tail's bytes
/// gathered one by one. Either way no call to `memcpy`.
#[inline]
pub(crate) fn tail_word(key: &[u8], tail: &[u8]) -> u64 {
    if key.len() >= 8 {
        word_at(&key[key.len() - 8..])
    } else {
        tail.iter().rev().fold(0, |w, &b| (w << 8) | u64::from(b))
    }
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
    }

    #[test]
    fn tail_word_reads_the_tail() {
        assert_eq!(
            tail_word(b"abc", b"abc"),
            u64::from_le_bytes(*b"abc\0\0\0\0\0")
        );
        assert_eq!(tail_word(b"", b""), 0);
        // Nine bytes: the last eight, overlapping the first word.
        assert_eq!(
            tail_word(b"012345678", b"8"),
            u64::from_le_bytes(*b"12345678")
        );
    }
}
